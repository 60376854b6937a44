"""The flat engine's per-event loop compiled (fairshare_core.FlowEvents, ``FlatFlowEngine.compiled_loop``) against
the same engine's events through the player's Python loop (``compiled_loop = False``): the same floats, bit for
bit - every node's start and end, every rank's times, the same solves and events - on whole plays (uneven MoE on a
3-tier fabric, with and without ECMP hash draws, flow contention, message overhead and endpoint delay; pipeline
with data parallelism; HTB's credit, where the compiled loop stands aside), with the slots' arrays compacted at
every chance or only when they grow (pure)."""

from __future__ import annotations

import pytest

from genie.core.topology import LinkShape
from genie.topology.builders import star
from genie.workloads.generators import TrainingConfig, expert_parallel, pipeline_parallel
from genie.workloads.presets import device_preset, model_preset

from astra_adapter.fabric import flat_slots
from astra_adapter.fabric.fairshare import FlowEvents
from astra_adapter.fabric.flat_flows import FlatFlowEngine
from astra_adapter.fabric.flows import FabricParams
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from benchmarks.fabric_accuracy import three_tier
from fabric_cases import fabric, moe as _moe

pytestmark = pytest.mark.skipif(FlowEvents is None, reason="astra_adapter.fabric.fairshare_core is not built "
                                "(pip install -e . builds it): the compiled event loop runs only there")

PARAMS = [FabricParams(), FabricParams(flow_contention=0.05),
          FabricParams(message_overhead_ns=3000.0, endpoint_delay_ns=20000.0)]


class PythonLoopEngine(FlatFlowEngine):
    compiled_loop = False


class CountedEngine(FlatFlowEngine):
    """The estimates' flat engine counting the advances that went through Python."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.python_events = 0

    def advance(self, dt_ns: float) -> None:
        self.python_events += 1
        super().advance(dt_ns)


@pytest.fixture(params=["grown", "compacted"])
def slots(request, monkeypatch):
    """The slots as they run, or compacted whenever a slot is given up (the arrays bound again each time)."""
    if request.param == "compacted":
        monkeypatch.setattr(flat_slots, "_MIN_COMPACT", -1)
    return request.param


def _same_play(trace, network, params) -> CountedEngine:
    engine = CountedEngine(network, params)
    got = play_on_fabric(trace, engine)
    python = PythonLoopEngine(network, params)
    want = play_on_fabric(trace, python)
    assert got.spans == want.spans and got.ranks == want.ranks  # every node's start and end, bit for bit
    assert engine.solves == python.solves and engine.events == python.events
    assert engine._live.components_solved == python._live.components_solved
    return engine


def test_the_estimates_engine_plays_its_events_compiled():
    assert FlatFlowEngine(FabricNetwork(fabric())).plays_events
    assert not PythonLoopEngine(FabricNetwork(fabric())).plays_events
    # standing queues read per-flow rates mid-advance: no incremental solve, no compiled loop
    assert not FlatFlowEngine(FabricNetwork(fabric()), FabricParams(standing_queues=True)).plays_events


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("seed", [None, 2])
def test_an_uneven_moe_play_on_the_compiled_loop_is_the_python_loops(slots, params, seed):
    engine = _same_play(_moe(seed=1 if seed is None else seed), FabricNetwork(fabric(), hash_seed=seed), params)
    # most events were played in C (a ring step's flow ends before its last; with latencies, fewer)
    assert engine.python_events < (0.6 if params.message_overhead_ns else 0.3) * engine.events


def test_a_pipeline_with_data_parallelism_on_the_compiled_loop_plays_as_the_python_loop(slots):
    model = model_preset("gpt3-1.3b").with_overrides(num_layers=4)
    trace = pipeline_parallel(model, device_preset("a100"), pp=4, dp=4, config=TrainingConfig(micro_batches=4))
    engine = _same_play(trace, FabricNetwork(fabric(), hash_seed=1), FabricParams(message_overhead_ns=3000.0))
    assert engine.python_events < engine.events


def test_with_the_credit_the_compiled_loop_stands_aside():
    """On links shaped below the devices' speed (HTB's buckets: the capacities change as their modes do)."""
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=1)
    trace = expert_parallel(model, device_preset("a100"), ep=8, dp=8,
                            config=TrainingConfig(routing_skew=1.0, routing_seed=3))
    network = FabricNetwork(star(8, shape=LinkShape(rate_bps=1_000_000_000)))
    engine = _same_play(trace, network, FabricParams(htb_credit=True))
    assert engine.credit is not None and engine.python_events == engine.events


def test_a_bigger_uneven_moe_play_on_three_tiers_is_the_python_loops():
    """32 ranks on a 3-tier fabric of 4 pods (EP8 groups across leaves and pods), a hash draw, contention."""
    topology = three_tier(hosts_per_leaf=4, leaves_per_pod=2, pods=4, aggs_per_pod=2, cores=2, ranks_per_host=1)
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=1)
    trace = expert_parallel(model, device_preset("a100"), ep=8, dp=32,
                            config=TrainingConfig(routing_skew=1.0, routing_seed=5))
    engine = _same_play(trace, FabricNetwork(topology, hash_seed=7), FabricParams(flow_contention=0.02))
    assert engine.python_events < 0.3 * engine.events
