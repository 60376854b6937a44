"""The flat flow engine (astra_adapter.fabric.flat_flows), with one max-min solve of every moving flow, gives the
reference FlowEngine's results, bit for bit (pure; small cases): random sets of concurrent collectives on a 3-tier
fabric, whole plays of real-shaped traces (uneven MoE, pipeline with data parallelism) with and without ECMP hash
draws, flow contention, message overhead and endpoint delay, and with standing queues (random sets of collectives,
random job mixes on random placements of an oversubscribed leaf-spine); and the compacting max-min solve gives the
reference solve's rates on random incidences."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from genie.core.alltoallv import busiest_even_size
from genie.core.collective import Algorithm, Collective
from genie.workloads.generators import TrainingConfig, expert_parallel, pipeline_parallel
from genie.workloads.presets import device_preset, model_preset

from astra_adapter.fabric.coflow import RING_MODEL
from astra_adapter.fabric.estimate import estimate_fabric
from astra_adapter.fabric.fairshare import max_min_rates, max_min_rates_compacting
from astra_adapter.fabric.flat_flows import FlatFlowEngine, engine_for
from astra_adapter.fabric.flows import FabricParams, FlowEngine, run_concurrently
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from astra_adapter.measurements import CommOp
from benchmarks.fabric_accuracy import three_tier
from fabric_mix_support import random_mixes

PARAMS = [FabricParams(), FabricParams(flow_contention=0.05),
          FabricParams(message_overhead_ns=3000.0, endpoint_delay_ns=20000.0)]


@pytest.fixture(autouse=True)
def _one_solve(monkeypatch):
    """Bit for bit holds for the one max-min solve of every moving flow (numpy, or compiled where it is built);
    the compiled per-component solve, the estimate's default, agrees to a tolerance: test_fabric_rates_compiled."""
    monkeypatch.setattr(FlatFlowEngine, "by_component", False)


def small_fabric():
    return three_tier(hosts_per_leaf=4, leaves_per_pod=2, pods=2, aggs_per_pod=2, cores=2, ranks_per_host=1)


def test_the_compacting_solve_gives_the_reference_rates_bit_for_bit():
    rng = np.random.default_rng(11)
    for _ in range(400):
        flows, resources = int(rng.integers(0, 50)), int(rng.integers(1, 25))
        flow_of = np.repeat(np.arange(flows), rng.integers(1, 5, size=flows))
        resource_of = rng.integers(0, resources, size=len(flow_of))
        weight = rng.choice([1.0, 0.5, 0.25, 1 / 3, 2.0, 3.0], size=len(flow_of))
        capacity = rng.choice([12.5, 1.25, 0.8, 4.0], size=resources) * rng.choice([1.0, 1.0 + 1e-10], size=resources)
        want = max_min_rates(flow_of, resource_of, weight, capacity, flows)
        got = max_min_rates_compacting(flow_of, resource_of, weight, capacity, flows)
        assert np.array_equal(got, want)


def _random_ops(rng, world: int) -> list[tuple[CommOp, tuple[int, ...]]]:
    ops = []
    for _ in range(int(rng.integers(2, 7))):
        members = tuple(sorted(rng.choice(world, size=int(rng.integers(2, 9)), replace=False).tolist()))
        n = len(members)
        kind = int(rng.integers(0, 4))
        size = int(rng.integers(1, 64)) * 4096
        if kind == 0:
            op = CommOp(Collective.ALL_REDUCE, Algorithm.RING, n, size)
        elif kind == 1:
            op = CommOp(Collective.ALL_GATHER, Algorithm.RING, n, size)
        elif kind == 2:
            op = CommOp(Collective.ALL_TO_ALL, Algorithm.DIRECT, n, size)
        else:  # uneven: every pair its own size, so the flows end one by one
            split = tuple(tuple(0 if i == j else int(rng.integers(1, 200)) * 512 for j in range(n)) for i in range(n))
            op = CommOp(Collective.ALL_TO_ALL, Algorithm.DIRECT, n, busiest_even_size(split), split_bytes=split)
        ops.append((op, members))
    return ops


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("seed", [None, 5])
def test_random_concurrent_collectives_end_when_the_reference_says(params, seed):
    rng = np.random.default_rng(3 if seed is None else seed)
    network = FabricNetwork(small_fabric(), hash_seed=seed)
    for _ in range(8):
        ops = _random_ops(rng, network.world_size)
        want = run_concurrently(FlowEngine(network, params), ops)
        got = run_concurrently(FlatFlowEngine(network, params), ops)
        assert got == want  # bit for bit


def _moe(layers: int = 2, seed: int = 1):
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=layers)
    return expert_parallel(model, device_preset("a100"), ep=8, dp=16,
                           config=TrainingConfig(routing_skew=1.0, routing_seed=seed))


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("seed", [None, 2])
def test_an_uneven_moe_play_is_the_references(params, seed):
    network = FabricNetwork(small_fabric(), hash_seed=seed)
    trace = _moe()
    want = play_on_fabric(trace, FlowEngine(network, params))
    got = play_on_fabric(trace, FlatFlowEngine(network, params))
    assert got.ranks == want.ranks
    assert got.spans == want.spans  # every node's start and end, bit for bit
    assert len({tuple(round(e - s) for _, s, e in spans) for spans in got.spans}) > 1  # uneven: it matters


def test_a_pipeline_with_data_parallelism_plays_as_the_reference():
    # point-to-point sends beside the DP all-reduces: ops of two kinds and sizes in flight, leaving one by one
    model = model_preset("gpt3-1.3b").with_overrides(num_layers=4)
    trace = pipeline_parallel(model, device_preset("a100"), pp=4, dp=4,
                              config=TrainingConfig(micro_batches=4))
    network = FabricNetwork(small_fabric(), hash_seed=1)
    want = play_on_fabric(trace, FlowEngine(network))
    got = play_on_fabric(trace, FlatFlowEngine(network))
    assert got.ranks == want.ranks
    assert got.spans == want.spans


def test_the_estimate_plays_on_the_flat_engine_with_or_without_queues():
    network = FabricNetwork(small_fabric())
    assert type(engine_for(network)) is FlatFlowEngine
    assert type(engine_for(network, FabricParams(standing_queues=True))) is FlatFlowEngine
    trace = _moe(layers=1, seed=4)
    est = estimate_fabric(trace, small_fabric(), ecmp_samples=2)  # the CLI's path: draws on engine_for's engine
    params = FabricParams(ring_model=RING_MODEL)  # (the estimates' ring model)
    want = [play_on_fabric(trace, FlowEngine(network.with_hash_seed(k), params)).iteration_ns for k in range(2)]
    assert est.draw_iterations_ns == tuple(want)


QUEUE_PARAMS = [FabricParams(standing_queues=True), FabricParams(standing_queues=True, flow_contention=0.05),
                FabricParams(standing_queues=True, message_overhead_ns=3000.0, endpoint_delay_ns=20000.0)]


@pytest.mark.parametrize("params", QUEUE_PARAMS)
@pytest.mark.parametrize("seed", [None, 5])
def test_random_concurrent_collectives_with_standing_queues_end_when_the_reference_says(params, seed):
    rng = np.random.default_rng(13 if seed is None else seed)
    network = FabricNetwork(small_fabric(), hash_seed=seed)
    waited = 0
    for _ in range(8):
        ops = _random_ops(rng, network.world_size)
        want = run_concurrently(FlowEngine(network, params), ops)
        got = run_concurrently(FlatFlowEngine(network, params), ops)
        assert got == want  # bit for bit
        waited += want != run_concurrently(FlowEngine(network, replace(params, standing_queues=False)), ops)
    assert waited  # the queues changed some ending: the term was exercised


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_job_mixes_with_standing_queues_play_as_the_reference(seed):
    # 2-4 jobs at random host slots and start offsets, each repeated twice: steps of different jobs enter while
    # others' flows keep the spine links full, mid-advance and in every order of the engine's ops
    rng = np.random.default_rng(seed)
    waited = 0
    for merged, contention, overhead_ns, network in random_mixes(rng):
        params = FabricParams(standing_queues=True, flow_contention=contention, message_overhead_ns=overhead_ns)
        want = play_on_fabric(merged, FlowEngine(network, params))
        got = play_on_fabric(merged, FlatFlowEngine(network, params))
        assert got.ranks == want.ranks
        assert got.spans == want.spans  # every node's start and end, bit for bit
        waited += want.spans != play_on_fabric(merged, FlatFlowEngine(network, replace(params,
                                                                                      standing_queues=False))).spans
    assert waited  # the queues changed the play: the term was exercised
