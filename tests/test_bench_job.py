"""The rank's side of a bench case (`genie.engine.rank.run_bench_job`) against a control plane that records."""

from __future__ import annotations

import time

from genie.core.collective import Algorithm, Collective
from genie.core.protocol import Barrier, BenchCase, BenchJob, CasePhase, CaseResult, Message
from genie.core.schedule import CollectiveOp
from genie.engine.rank import run_bench_job
from genie.engine.transport import SocketTransport


class RecordingControl:
    """Every barrier and message in order, with the monotonic time it was made at."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, Message | Barrier]] = []

    def send(self, message: Message) -> None:
        self.events.append(("send", time.monotonic_ns(), message))

    def barrier(self, barrier: Barrier = Barrier()) -> int:
        now = time.monotonic_ns()
        self.events.append(("barrier", now, barrier))
        return now


def _job(group: tuple[int, ...], iterations: int) -> BenchJob:
    op = CollectiveOp(Collective.ALL_REDUCE, 1 << 12, group, Algorithm.RING, dtype_bytes=4)
    return BenchJob(cases=(BenchCase(op, 1, iterations), BenchCase(op, 0, iterations)), timeout_s=5.0)


def test_a_case_is_reported_only_after_a_barrier_that_follows_its_last_timed_iteration():
    control = RecordingControl()
    run_bench_job(_job((0,), 4), 0, SocketTransport(0, {}), control)  # a one-rank group: no peers
    kinds = [kind for kind, _, _ in control.events]
    assert kinds == ["barrier", "barrier", "barrier", "send"] * 2
    for case in range(2):
        (_, final_barrier_ns, _), (_, _, result) = control.events[4 * case + 2: 4 * case + 4]
        assert isinstance(result, CaseResult) and result.case == case and len(result.iterations) == 4
        assert all(start <= end <= final_barrier_ns for start, end in result.iterations)
    # each case's barriers say where they stand: the orchestrator reads the ranks' CPU at TIMED and END
    tags = [(b.case, b.phase) for kind, _, b in control.events if kind == "barrier"]
    assert tags == [(c, p) for c in range(2) for p in (CasePhase.WARMUP, CasePhase.TIMED, CasePhase.END)]


def test_a_rank_outside_the_group_joins_every_barrier_and_reports_no_iterations():
    control = RecordingControl()
    run_bench_job(_job((0, 1), 3), 2, None, control)
    assert [kind for kind, _, _ in control.events] == ["barrier", "barrier", "barrier", "send"] * 2
    assert all(msg.iterations == () for kind, _, msg in control.events if kind == "send")


def test_the_check_iteration_runs_after_the_timed_loop_as_nccl_tests_and_the_warmups_move_no_real_data(monkeypatch):
    """nccl-tests' -c checks after its timed loop: the real data's copies and reductions must not run right before
    the timed iterations (measured: the 64 MiB ring at N = 2 lost 0.5 % with the check in front of them), and the
    warmups run as the timed iterations do. Every rank waits at a CHECK barrier first, which closes the timed
    window."""
    import dataclasses

    from genie.engine import executor

    control = RecordingControl()
    real = executor.run_schedule

    def recording(schedule, transport, **kw):
        control.events.append(("schedule", time.monotonic_ns(), kw.get("data") is not None))
        return real(schedule, transport, **kw)

    monkeypatch.setattr(executor, "run_schedule", recording)
    job = dataclasses.replace(_job((0,), 2), verify=True)
    run_bench_job(job, 0, SocketTransport(0, {}), control)
    steps = [(kind, m.phase if kind == "barrier" else m) for kind, _, m in control.events if kind != "send"]
    case = [("barrier", CasePhase.WARMUP), ("schedule", False),  # case 0 has one warmup, without data
            ("barrier", CasePhase.TIMED)]
    assert steps[:3] == case
    check_at = steps.index(("barrier", CasePhase.CHECK))
    assert all(s == ("schedule", False) for s in steps[3:check_at])  # the timed iterations (or none: compiled)
    assert steps[check_at:check_at + 3] == [("barrier", CasePhase.CHECK), ("schedule", True),
                                             ("barrier", CasePhase.END)]
    tags = [(b.case, b.phase) for kind, _, b in control.events if kind == "barrier"]
    assert tags == [(c, p) for c in range(2)
                    for p in (CasePhase.WARMUP, CasePhase.TIMED, CasePhase.CHECK, CasePhase.END)]


def test_a_rank_outside_the_group_joins_the_check_barrier_too():
    import dataclasses

    control = RecordingControl()
    run_bench_job(dataclasses.replace(_job((0, 1), 3), verify=True), 2, None, control)
    assert [kind for kind, _, _ in control.events] == ["barrier"] * 4 + ["send"] + ["barrier"] * 4 + ["send"]
