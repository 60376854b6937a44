"""What ``genie estimate --mode fabric`` does before its draws, cut without changing a result: a big trace checked
in a forked child (:class:`genie.core.forked_call.ForkedCall`) beside the fabric model's compile and plans, every
op's sends built once before the draw workers fork (:func:`astra_adapter.fabric.estimate.op_sends`), the cyclic
collector paused (benchmarks/README.md, "The 1024-rank CLI's parent")."""

from __future__ import annotations

import gc
import os
import signal
import time
from pathlib import Path

import pytest

import genie.core.forked_call as forked_call
from genie.core.forked_call import ForkedCall

ROOT = Path(__file__).resolve().parent.parent


# ---- ForkedCall ----------------------------------------------------------------------------------------------
def _pid_and_double(x):
    return os.getpid(), [2 * v for v in x]


def test_the_value_comes_from_the_forked_child():
    data = list(range(100_000))  # the child has it by fork; only the value comes back (a pipe's worth and more)
    with ForkedCall(_pid_and_double, data) as call:
        pid, doubled = call.result()
        assert call.result()[1] is doubled  # computed once
    assert pid != os.getpid() and doubled == [2 * v for v in data]


def _raises_in_a_child(parent: int):
    if os.getpid() != parent:
        raise RuntimeError("only the child fails")
    return "computed here"


def _sleeps_in_a_child(parent: int):
    if os.getpid() != parent:
        time.sleep(3600)
    return "computed here"


def _fails_everywhere(_):
    raise ValueError("a bad input")


def test_a_child_that_raises_or_dies_gives_the_value_computed_here():
    with ForkedCall(_raises_in_a_child, os.getpid()) as call:
        assert call.result() == "computed here"
    call = ForkedCall(_sleeps_in_a_child, os.getpid())
    pid = call._pid
    os.kill(pid, signal.SIGKILL)  # the OOM killer, say
    assert call.result() == "computed here"
    with pytest.raises(ChildProcessError):  # reaped
        os.waitpid(pid, os.WNOHANG)
    with ForkedCall(_fails_everywhere, None) as call, pytest.raises(ValueError, match="a bad input"):
        call.result()  # the function's own error, raised here as a call here raises it


def test_a_child_that_has_not_started_in_time_is_killed_and_the_value_computed_here(monkeypatch):
    monkeypatch.setattr(forked_call, "START_TIMEOUT_S", 0.0)  # taken as wedged before it ran
    call = ForkedCall(_sleeps_in_a_child, os.getpid())
    pid = call._pid
    assert call.result() == "computed here"
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_closing_kills_and_reaps_a_child_still_running():
    with ForkedCall(_sleeps_in_a_child, os.getpid()) as call:
        pid = call._pid
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


# ---- the sends built before the draws --------------------------------------------------------------------------
def test_the_sends_built_first_are_exactly_what_the_plays_ask_for():
    from astra_adapter.fabric.estimate import op_sends
    from astra_adapter.fabric.flat_flows import engine_for
    from astra_adapter.fabric.flows import ECMP_SAMPLES, FabricParams, StepSends
    from astra_adapter.fabric.network import FabricNetwork, sample_networks
    from astra_adapter.fabric.player import play_on_fabric
    from astra_adapter.timeline import CompiledTrace
    from fabric_cases import fabric, moe

    trace = moe(seed=3, layers=2)
    compiled = CompiledTrace(trace)
    built = op_sends(compiled)
    keys = set(built._cache)
    net = sample_networks(FabricNetwork(fabric()), ECMP_SAMPLES)[1]
    params = FabricParams(end_precision=1e-3)
    fresh = StepSends()
    lazily = play_on_fabric(trace, engine_for(net, params, fresh), compiled)
    assert set(fresh._cache) == keys  # the play asked for every op's sends and no other
    first = play_on_fabric(trace, engine_for(net, params, built), compiled)
    assert set(built._cache) == keys and first == lazily


def test_play_draws_calls_before_plays_once_before_the_first_play():
    from astra_adapter.fabric import estimate
    from astra_adapter.fabric.flows import ECMP_SAMPLES, FabricParams
    from astra_adapter.fabric.network import FabricNetwork, sample_networks
    from fabric_cases import fabric, moe

    trace = moe(seed=3, layers=2)
    nets = sample_networks(FabricNetwork(fabric()), ECMP_SAMPLES)[:2]
    calls = []
    played = estimate.play_draws(trace, nets, FabricParams(), workers=1, before_plays=lambda: calls.append("x"))
    assert calls == ["x"] and len(played) == 2

    def refuse():
        raise RuntimeError("the trace is bad")

    with pytest.raises(RuntimeError, match="the trace is bad"):
        estimate.play_draws(trace, nets, FabricParams(), workers=2, before_plays=refuse)


# ---- the service -------------------------------------------------------------------------------------------------
def _estimate(tmp_path: Path, name: str, trace: Path, topology: Path):
    from tests.cli_support import run_genie

    return run_genie("estimate", trace, "--topology", topology, "--mode", "fabric", "--out", tmp_path / name,
                     cwd=ROOT)


def test_a_trace_checked_aside_gives_the_same_estimate_byte_for_byte(tmp_path, monkeypatch):
    import genie.services.estimate as service

    trace, topology = ROOT / "traces" / "gen_moe_ep8_gpt3", ROOT / "topologies" / "leaf-spine-2x4-oversub.yaml"
    started = []

    class Counted(ForkedCall):
        def __init__(self, fn, arg):
            started.append(fn.__name__)
            super().__init__(fn, arg)

    monkeypatch.setattr(forked_call, "ForkedCall", Counted)
    here = _estimate(tmp_path, "here", trace, topology)
    assert here.returncode == 0, here.stderr
    assert started == []
    monkeypatch.setattr(service, "CHECK_ASIDE_MIN_NODES", 0)  # every trace checked in a forked child
    aside = _estimate(tmp_path, "aside", trace, topology)
    assert aside.returncode == 0, aside.stderr
    assert started == ["validate"]
    assert (tmp_path / "aside" / "estimate.csv").read_bytes() == (tmp_path / "here" / "estimate.csv").read_bytes()
    assert aside.stdout.replace(str(tmp_path / "aside"), str(tmp_path / "here")) == here.stdout


_BAD = """format: genie-trace
version: 1
name: bad
ranks: 4
groups:
  all: [0, 1, 2, 3]
program:
  - {id: 0, name: fwd, type: compute, duration: 120us}
  - {id: 1, name: ar, type: all_reduce, size: 8MiB, group: all, deps: [0, 99]}
"""


@pytest.mark.parametrize("aside", [False, True])
def test_a_bad_trace_checked_aside_is_refused_first_as_before(tmp_path, monkeypatch, aside):
    """The trace's own error, one line, exit 2, nothing written - before the topology's (8 hosts for 4 ranks),
    which the estimate finds while the check still runs aside."""
    import genie.services.estimate as service

    if aside:
        monkeypatch.setattr(service, "CHECK_ASIDE_MIN_NODES", 0)
    bad = tmp_path / "bad.yaml"
    bad.write_text(_BAD)
    done = _estimate(tmp_path, "out", bad, ROOT / "topologies" / "leaf-spine-2x4.yaml")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and not (tmp_path / "out").exists()
    assert "depends on missing node 99" in done.stderr and "bad.yaml" in done.stderr
    good = tmp_path / "good.yaml"
    good.write_text(_BAD.replace(", 99]", "]"))
    done = _estimate(tmp_path, "out", good, ROOT / "topologies" / "leaf-spine-2x4.yaml")
    assert done.returncode == 2 and "the trace has 4 ranks but topology" in done.stderr


def test_a_bad_trace_whose_draws_are_forked_is_refused_first_and_leaves_no_worker(tmp_path, monkeypatch):
    """The check joined once the draw workers are forked (`fork_map`'s ``when_forked``): the trace's own error,
    one line, exit 2, nothing written, and every worker gone."""
    import multiprocessing

    import astra_adapter.fabric.estimate as fabric_estimate
    import genie.services.estimate as service

    monkeypatch.setattr(service, "CHECK_ASIDE_MIN_NODES", 0)
    monkeypatch.setattr(fabric_estimate, "PARALLEL_MIN_NODES", 0)  # the draws in forked workers
    joined = []
    fork_map = fabric_estimate.fork_map

    def watched(*args, **kwargs):
        joined.append(kwargs.get("when_forked") is not None)
        return fork_map(*args, **kwargs)

    monkeypatch.setattr(fabric_estimate, "fork_map", watched)
    bad = tmp_path / "bad8.yaml"
    bad.write_text(_BAD.replace("ranks: 4", "ranks: 8").replace("[0, 1, 2, 3]", "[0, 1, 2, 3, 4, 5, 6, 7]"))
    before = set(multiprocessing.active_children())
    done = _estimate(tmp_path, "out", bad, ROOT / "topologies" / "leaf-spine-2x4.yaml")
    assert joined == [True]  # the check was joined in the workers' map, not before it
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and not (tmp_path / "out").exists()
    assert "depends on missing node 99" in done.stderr
    assert not set(multiprocessing.active_children()) - before


def test_the_estimate_and_the_read_leave_the_collector_as_they_found_it(tmp_path):
    from genie.workloads.loader import load_trace

    trace, topology = ROOT / "traces" / "gen_moe_ep8_gpt3", ROOT / "topologies" / "leaf-spine-2x4-oversub.yaml"
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            load_trace(trace)
            assert _estimate(tmp_path, f"gc-{enabled}", trace, topology).returncode == 0
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


# ---- the read --------------------------------------------------------------------------------------------------
def test_the_read_shares_equal_attributes_and_gives_every_node_as_parsed_alone():
    """read_et_set memoises attributes by their encoded bytes: every node equals its own record parsed with no
    memo, and equal attributes anywhere in the set are one object."""
    from genie.workloads import chakra_et
    from genie.workloads.et_files import rank_files
    from genie.workloads.et_schema import messages

    prefix = ROOT / "traces" / "gen_moe_ep8_gpt3" / "gen_moe_ep8_gpt3"
    trace = chakra_et.read_et_set(prefix)
    seen: dict = {}
    for rank, path in sorted(rank_files(prefix).items()):
        alone = []
        for _, payload in chakra_et.iter_frames(path.read_bytes())[1:]:
            pb = messages().Node()
            pb.ParseFromString(payload)
            alone.append(chakra_et.node_from_pb(pb, unknown_fields=False))
        assert list(trace.ranks[rank].nodes) == alone
        for node in trace.ranks[rank].nodes:
            for a in node.attrs:
                assert seen.setdefault(a, a) is a
    assert len(seen) < sum(len(n.attrs) for r in trace.ranks for n in r.nodes)


def test_an_estimate_s_manifest_covers_the_read_and_the_play(tmp_path, monkeypatch):
    """The run's record opens before the trace is read and the model plays: `duration_s` (and `genie report`'s
    "took") is the estimate's, not the writing of its files (it was 0.0 s for a minute's 1024-rank estimate)."""
    import json

    import astra_adapter.fabric.estimate as fabric_estimate
    from genie.services.estimate import EstimateRequest, run_estimate

    played = fabric_estimate.estimate_fabric_from_runs

    def slow(*args, **kwargs):
        time.sleep(0.3)  # the play's time, made long enough to see beside the file writes
        return played(*args, **kwargs)

    monkeypatch.setattr(fabric_estimate, "estimate_fabric_from_runs", slow)
    result = run_estimate(EstimateRequest(ROOT / "traces" / "gen_moe_ep8_gpt3", mode=None,
                                          topology=ROOT / "topologies" / "leaf-spine-2x4-oversub.yaml",
                                          out=tmp_path / "est"))
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["duration_s"] >= 0.3
    assert manifest["params"]["mode"] == "fabric" and [i["role"] for i in manifest["inputs"]] == ["trace", "topology"]
