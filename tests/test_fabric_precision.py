"""The flat engine's flow ends within a relative precision played as one event (``FabricParams.end_precision``,
``LiveRates.end_precision``) against the exact play (precision 0): uneven MoE on a 3-tier fabric with and without
ECMP hash draws, flow contention, message overhead and endpoint delay - the iteration and every node's end within
the stated tolerance, fewer events; precision 0 bit for bit the engine's exact play; standing queues (where the
incremental solve does not run) exact whatever the setting (pure)."""

from __future__ import annotations

import pytest

from astra_adapter.fabric.fairshare import LiveRates
from astra_adapter.fabric.flat_flows import FlatFlowEngine
from astra_adapter.fabric.flows import FabricParams
from astra_adapter.fabric.network import FabricNetwork, sample_networks
from astra_adapter.fabric.player import play_on_fabric
from fabric_cases import fabric, moe as _moe

pytestmark = pytest.mark.skipif(LiveRates is None, reason="astra_adapter.fabric.fairshare_core is not built "
                                "(pip install -e . builds it): the precision applies on its incremental solve")

PARAMS = [FabricParams(), FabricParams(flow_contention=0.05),
          FabricParams(message_overhead_ns=3000.0, endpoint_delay_ns=20000.0)]


def _with(params: FabricParams, precision: float) -> FabricParams:
    from dataclasses import replace
    return replace(params, end_precision=precision)


def _play(trace, network, params):
    engine = FlatFlowEngine(network, params)
    return play_on_fabric(trace, engine), engine


def _within(got, want, tolerance: float) -> None:
    """The iteration within ``tolerance`` relative of the exact play's, and every node's end within ``tolerance``
    of the exact iteration of its exact end."""
    exact = want.iteration_ns
    assert abs(got.iteration_ns - exact) <= tolerance * exact
    for g, w in zip(got.spans, want.spans):
        assert [n for n, _s, _e in g] == [n for n, _s, _e in w]
        for (_n, _gs, ge), (_m, _ws, we) in zip(g, w):
            assert abs(ge - we) <= tolerance * exact


@pytest.mark.parametrize("params", PARAMS, ids=["plain", "contention", "overhead"])
@pytest.mark.parametrize("draw", [-1, 0, 3])
def test_ends_within_the_precision_are_one_event_and_the_play_stays_within_it(params, draw):
    network = FabricNetwork(fabric())
    net = network if draw < 0 else sample_networks(network, draw + 1)[draw]
    trace = _moe(seed=draw + 5)
    want, exact = _play(trace, net, params)
    for precision in (1e-4, 1e-3, 1e-2):
        got, merged = _play(trace, net, _with(params, precision))
        _within(got, want, precision)
        assert merged.events < exact.events  # ends were merged


class PythonLoopEngine(FlatFlowEngine):
    compiled_loop = False


def test_the_compiled_loop_merges_as_the_python_loop_does():
    """The merge is in the move both loops call: the same floats on the compiled loop and the Python loop."""
    network = sample_networks(FabricNetwork(fabric()), 1)[0]
    trace = _moe(seed=2)
    params = _with(FabricParams(), 1e-3)
    got = play_on_fabric(trace, FlatFlowEngine(network, params))
    want = play_on_fabric(trace, PythonLoopEngine(network, params))
    assert got.spans == want.spans and got.ranks == want.ranks


def test_standing_queues_stay_exact_whatever_the_precision():
    network = sample_networks(FabricNetwork(fabric()), 1)[0]
    trace = _moe(seed=4, layers=1)
    queues = FabricParams(standing_queues=True)
    want, _ = _play(trace, network, _with(queues, 0.0))
    got, _ = _play(trace, network, _with(queues, 1e-2))
    assert got.spans == want.spans and got.ranks == want.ranks


def test_the_cli_takes_the_precision_and_records_it(tmp_path):
    import json
    from pathlib import Path

    from tests.cli_support import run_genie

    root = Path(__file__).resolve().parent.parent
    trace, topology = root / "traces" / "gen_moe_ep8_gpt3", root / "topologies" / "leaf-spine-2x4-oversub.yaml"
    exact = run_genie("estimate", trace, "--topology", topology, "--end-precision", "0", "--out", tmp_path / "e",
                      cwd=root)
    assert exact.returncode == 0, exact.stderr
    merged = run_genie("estimate", trace, "--topology", topology, "--end-precision", "0.01", "--out",
                       tmp_path / "m", cwd=root)
    assert merged.returncode == 0, merged.stderr
    assert "flow ends within 0.01 of their step's time as one event" in merged.stdout
    assert "as one event" not in exact.stdout
    params = [json.loads((tmp_path / d / "manifest.json").read_text())["params"] for d in ("e", "m")]
    assert [p["end_precision"] for p in params] == [0.0, 0.01]
    iterations = [float(d.stdout.split("iteration ")[1].split(" ms")[0]) for d in (exact, merged)]
    assert abs(iterations[1] - iterations[0]) <= 0.01 * iterations[0]


def test_a_precision_out_of_range_is_a_one_line_error(tmp_path):
    from pathlib import Path

    from tests.cli_support import run_genie

    root = Path(__file__).resolve().parent.parent
    done = run_genie("estimate", root / "traces" / "gen_moe_ep8_gpt3", "--topology",
                     root / "topologies" / "leaf-spine-2x4-oversub.yaml", "--end-precision", "1.5", "--out",
                     tmp_path / "o", cwd=root)
    assert done.returncode == 2 and "--end-precision" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_the_estimates_default_precision_keeps_the_stated_tolerance():
    """``estimate_fabric`` plays at ``END_PRECISION`` by default: every rank's figures within it of the exact
    estimate's (the mean over hash draws), and each draw's iteration too."""
    from astra_adapter.fabric.estimate import estimate_fabric
    from astra_adapter.fabric.flows import END_PRECISION

    assert 0 < END_PRECISION <= 1e-3
    topology, trace = fabric(), _moe(seed=9, layers=3)
    merged = estimate_fabric(trace, topology, ecmp_samples=3)
    exact = estimate_fabric(trace, topology, ecmp_samples=3, end_precision=0.0)
    assert any("as one event" in note for note in merged.notes) and not any("as one event" in n for n in exact.notes)
    for got, want in zip(merged.draw_iterations_ns, exact.draw_iterations_ns):
        assert abs(got - want) <= END_PRECISION * want
    for got, want in zip(merged.ranks, exact.ranks):
        assert abs(got.iteration_ns - want.iteration_ns) <= END_PRECISION * exact.iteration_ns
        assert abs(got.comm_ns - want.comm_ns) <= END_PRECISION * exact.iteration_ns
