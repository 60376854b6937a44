"""The compiled max-min filling walked by resource (astra_adapter/fabric/fairshare_fill.pxi, the default) against
the filling that scans every live entry each round (``scan_entries``: session 21's, operation for operation the
numpy code's) and against the numpy solve itself, on large components - many routes, many distinct bottleneck
levels (expected ECMP shares, flow contention, flows repeated on one route), a ring joining all-to-all groups into
one component as data-parallel rings do in an MoE play - and on whole plays: the same floats, bit for bit (pure)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from astra_adapter.fabric.fairshare import LiveRates, MovingRates
from astra_adapter.fabric.flows import FabricParams, FlowEngine
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from benchmarks.fabric_accuracy import three_tier
from test_fabric_rates_compiled import RoundsFlatFlowEngine, _moe, _numpy_rates

pytestmark = pytest.mark.skipif(MovingRates is None and not os.environ.get("CI"),
                                reason="astra_adapter.fabric.fairshare_core is not built (pip install -e . builds it)")


def fabric():
    return three_tier(hosts_per_leaf=8, leaves_per_pod=4, pods=2, aggs_per_pod=2, cores=2, ranks_per_host=1)


def _groups_and_ring(rng, network: FabricNetwork) -> np.ndarray:
    """Routes of a few all-to-all groups of random hosts (flows repeated on some routes) and, half the time, a
    ring over every host that joins them into one component."""
    n = network.world_size
    pairs = []
    for _ in range(int(rng.integers(1, 6))):
        hosts = rng.choice(n, size=int(rng.integers(3, 12)), replace=False).tolist()
        pairs += [(a, b) for a in hosts for b in hosts if a != b and rng.random() < 0.8]
    if rng.random() < 0.5:
        pairs += [(h, (h + 1) % n) for h in range(n)]
    pairs += [pairs[int(k)] for k in rng.integers(0, len(pairs), size=len(pairs) // 4)]
    return np.array([network.route(a, b) for a, b in pairs], dtype=np.int64)


@pytest.mark.parametrize("contention", [0.0, 0.05])
@pytest.mark.parametrize("seed", [None, 4])
def test_the_fill_by_resource_is_the_numpy_solve_and_the_scanning_fill_bit_for_bit(contention, seed):
    network = FabricNetwork(fabric(), hash_seed=seed)
    engine = FlowEngine(network, FabricParams(flow_contention=contention))
    by_resource = MovingRates(engine.capacity, contention, False)  # one fill of every moving route
    scanning = MovingRates(engine.capacity, contention, False)
    scanning.scan_entries = True
    rng = np.random.default_rng(9)
    largest = 0
    for _ in range(40):
        routes = _groups_and_ring(rng, network)
        active = rng.random(len(routes)) < 0.9
        ptr, res, w = engine._route_table(len(network.routes) - 1)
        got = by_resource.rates(routes, active.view(np.uint8), ptr, res, w)
        assert np.array_equal(got, scanning.rates(routes, active.view(np.uint8), ptr, res, w))
        assert np.array_equal(got, _numpy_rates(engine, routes, active))
        largest = max(largest, len(set(routes[active].tolist())))
        assert len(np.unique(got[active])) > 3  # many bottleneck levels, so many rounds
    assert largest > 200


@pytest.mark.parametrize("contention", [0.0, 0.05])
@pytest.mark.parametrize("seed", [None, 4])
def test_the_incremental_solve_by_resource_gives_the_scanning_solves_floats(contention, seed):
    """LiveRates as the flat engine drives it, flows ending a few at a time in a large component (its routes sorted
    without qsort beyond 32): every rate the scanning solve's, and the per-component solve's, bit for bit."""
    network = FabricNetwork(fabric(), hash_seed=seed)
    engine = FlowEngine(network, FabricParams(flow_contention=contention))
    live, scanning = LiveRates(engine.capacity, contention), LiveRates(engine.capacity, contention)
    scanning.scan_entries = True
    walk = MovingRates(engine.capacity, contention)
    rng = np.random.default_rng(13)
    solved = 0
    for _ in range(6):
        routes = _groups_and_ring(rng, network)
        active = np.ones(len(routes), dtype=np.uint8)
        while active.any():
            for solve in (live, scanning):
                solve.set_moving(routes, active, len(network.routes))
                solve.solve(*engine._route_table(len(network.routes) - 1))
            want = walk.rates(routes, active, *engine._route_table(len(network.routes) - 1))
            got = live.flow_rates(routes, active)
            assert np.array_equal(got, scanning.flow_rates(routes, active)) and np.array_equal(got, want)
            solved += 1
            ending = np.flatnonzero(active)[rng.integers(0, active.sum(), size=int(rng.integers(1, 40)))]
            active[ending] = 0
    assert solved > 30 and live.components_solved == scanning.components_solved


@pytest.mark.parametrize("params", [FabricParams(), FabricParams(flow_contention=0.05)])
def test_an_uneven_moe_play_fills_by_resource_as_it_fills_scanning(params):
    trace = _moe(seed=2, dp=32)
    network = FabricNetwork(fabric(), hash_seed=3)
    engine, scanning = RoundsFlatFlowEngine(network, params), RoundsFlatFlowEngine(network, params)
    scanning._live.scan_entries = True
    got, want = play_on_fabric(trace, engine), play_on_fabric(trace, scanning)
    assert got.spans == want.spans and got.ranks == want.ranks
    assert engine._live.components_solved == scanning._live.components_solved > 0
