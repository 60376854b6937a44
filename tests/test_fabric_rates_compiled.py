"""The flat engine's compiled rate solve (astra_adapter/fabric/fairshare_core.pyx) gives the numpy path's rates bit
for bit: random sets of moving flows on 3-tier fabrics (expected ECMP shares and hash draws, with and without flow
contention, flows repeated on one route, flows that ended), and whole plays of the flat engine with and without
it (pure)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from genie.workloads.generators import TrainingConfig, expert_parallel
from genie.workloads.presets import device_preset, model_preset

from astra_adapter.fabric.fairshare import MovingRates
from astra_adapter.fabric.flat_flows import FlatFlowEngine
from astra_adapter.fabric.flows import FabricParams, FlowEngine
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from benchmarks.fabric_accuracy import three_tier

pytestmark = pytest.mark.skipif(MovingRates is None and not os.environ.get("CI"),
                                reason="astra_adapter.fabric.fairshare_core is not built (pip install -e . builds it)")


class NumpyFlatFlowEngine(FlatFlowEngine):
    compiled_solve = False


def fabric():
    return three_tier(hosts_per_leaf=4, leaves_per_pod=2, pods=2, aggs_per_pod=2, cores=2, ranks_per_host=1)


def test_ci_builds_the_compiled_solve():
    """CI installs a compiler (scripts/setup.sh): there the compiled solve must exist, not be skipped."""
    assert MovingRates is not None


def _numpy_rates(engine: FlowEngine, routes: np.ndarray, active: np.ndarray) -> np.ndarray:
    """The numpy path of FlatFlowEngine._rate_flows: the reference's solve of the sorted moving routes."""
    moving = routes[active]
    rate = np.zeros(len(routes))
    if len(moving):
        unique, per_flow = engine._solve(np.sort(moving))
        rate[active] = per_flow[np.searchsorted(unique, moving)]
    return rate


@pytest.mark.parametrize("contention", [0.0, 0.05])
@pytest.mark.parametrize("seed", [None, 3])
def test_the_compiled_solve_gives_the_numpy_rates_bit_for_bit(contention, seed):
    network = FabricNetwork(fabric(), hash_seed=seed)
    engine = FlowEngine(network, FabricParams(flow_contention=contention))
    solve = MovingRates(engine.capacity, contention)
    rng = np.random.default_rng(7)
    n = network.world_size
    for _ in range(150):
        flows = int(rng.integers(0, 60))
        pairs = rng.integers(0, n, size=(flows, 2))
        pairs[:, 1] = np.where(pairs[:, 0] == pairs[:, 1], (pairs[:, 1] + 1) % n, pairs[:, 1])
        if flows:
            pairs[rng.random(flows) < 0.3] = pairs[0]  # flows repeated on one route
        routes = np.array([network.route(int(a), int(b)) for a, b in pairs], dtype=np.int64)
        active = rng.random(flows) < 0.8
        want = _numpy_rates(engine, routes, active)
        ptr, res, w = engine._route_table(len(network.routes) - 1)
        got = solve.rates(routes, active.view(np.uint8), ptr, res, w)
        assert np.array_equal(got, want)
        assert not got[~active].any()


@pytest.mark.parametrize("params", [FabricParams(), FabricParams(flow_contention=0.05)])
def test_a_moe_play_with_the_compiled_solve_is_the_numpy_one(params):
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=2)
    trace = expert_parallel(model, device_preset("a100"), ep=8, dp=16,
                            config=TrainingConfig(routing_skew=1.0, routing_seed=3))
    network = FabricNetwork(fabric(), hash_seed=1)
    compiled = FlatFlowEngine(network, params)
    assert compiled._compiled is not None
    want = play_on_fabric(trace, NumpyFlatFlowEngine(network, params))
    got = play_on_fabric(trace, compiled)
    assert got.ranks == want.ranks
    assert got.spans == want.spans
    assert compiled.solves > 10
