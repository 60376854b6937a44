"""How a step's gaps between top-level ops are split into compute and waiting (genie.workloads.pytorch_import):
on fixed events, so the rule is checked whatever the host's scheduling did in a live capture."""

from __future__ import annotations

from genie.workloads.pytorch_et import KinetoEvent
from genie.workloads.pytorch_import import _gaps


def _op(start_us: float, dur_us: float) -> KinetoEvent:
    return KinetoEvent(name="aten::mm", tid=1, start_us=start_us, dur_us=dur_us, rf_id=None, input_dims="[]",
                       category="cpu_op", stream=None)


def test_a_gap_with_no_hidden_work_is_compute() -> None:
    assert _gaps([_op(10, 5), _op(20, 5)], (0, 30), []) == [(0, 10, 0.0), (1, 5, 0.0), (2, 5, 0.0)]


def test_a_gap_while_hidden_work_is_in_flight_is_waiting() -> None:
    # the reducer's all-reduce runs 14..22: the gap 15..20 overlaps it (waiting), 0..10 and 25..30 do not
    assert _gaps([_op(10, 5), _op(20, 5)], (0, 30), [(14.0, 22.0)]) == [(0, 10, 0.0), (1, 0.0, 5), (2, 5, 0.0)]


def test_gaps_are_clipped_to_the_step_and_nested_ops_do_not_open_one() -> None:
    # an op inside the previous one's span leaves no gap; the last op runs past the window's end
    assert _gaps([_op(2, 10), _op(4, 2), _op(15, 20)], (0, 30), []) == [(0, 2, 0.0), (2, 3, 0.0)]
