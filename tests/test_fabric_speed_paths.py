"""The fabric model's fast paths give the results of the straightforward ones (pure; small cases).

FlowEngine._solve gathers a solve's incidence from one CSR table of every route; the reference below builds
it route by route, as the engine did before. Both must give the same rates, bit for bit, and a whole play of an
uneven MoE trace on a 3-tier fabric the same timeline."""

from __future__ import annotations

import numpy as np
import pytest

from genie.workloads.generators import TrainingConfig, expert_parallel
from genie.workloads.presets import device_preset, model_preset

from astra_adapter.fabric.fairshare import max_min_rates
from astra_adapter.fabric.flows import FabricParams, FlowEngine
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from benchmarks.fabric_accuracy import three_tier


class RouteByRouteEngine(FlowEngine):
    """The engine with the reference solve: the incidence built one route at a time."""

    def _solve(self, routes: np.ndarray):
        key = routes.tobytes()
        hit = self._rates.get(key)
        if hit is not None:
            return hit
        unique, counts = np.unique(routes, return_counts=True)
        flow_of, resource_of, weight = [], [], []
        for f, rid in enumerate(unique):
            route = self.network.routes[int(rid)]
            flow_of.append(np.full(len(route.loads), f))
            resource_of.append(np.array([r for r, _ in route.loads], dtype=np.int64))
            weight.append(np.array([w for _, w in route.loads]) * counts[f])
        resource_of_all, weight_all = np.concatenate(resource_of), np.concatenate(weight)
        capacity = self.capacity
        if self.params.flow_contention > 0:
            flows_on = np.bincount(resource_of_all, weights=weight_all, minlength=len(capacity))
            capacity = capacity / (1 + self.params.flow_contention * np.maximum(flows_on - 1, 0))
        per_flow = max_min_rates(np.concatenate(flow_of), resource_of_all, weight_all, capacity, len(unique))
        hit = self._rates[key] = (unique, per_flow)
        return hit


def small_fabric():
    return three_tier(hosts_per_leaf=4, leaves_per_pod=2, pods=2, aggs_per_pod=2, cores=2, ranks_per_host=1)


@pytest.mark.parametrize("params", [FabricParams(), FabricParams(flow_contention=0.05)])
@pytest.mark.parametrize("seed", [None, 3])
def test_the_gathered_incidence_solves_as_route_by_route(params, seed):
    network = FabricNetwork(small_fabric(), hash_seed=seed)
    rng = np.random.default_rng(7)
    n = network.world_size
    pairs = [(int(a), int(b)) for a, b in rng.integers(0, n, size=(200, 2)) if a != b]
    routes = np.array([network.route(a, b) for a, b in pairs], dtype=np.int64)
    fast, slow = FlowEngine(network, params), RouteByRouteEngine(network, params)
    for k in range(1, len(routes), 17):  # growing sets, the table extended as routes appear
        got, want = fast._solve(np.sort(routes[:k])), slow._solve(np.sort(routes[:k]))
        assert np.array_equal(got[0], want[0])
        assert np.array_equal(got[1], want[1])  # bit for bit


def test_an_uneven_moe_play_is_unchanged():
    topology = small_fabric()
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=2)
    trace = expert_parallel(model, device_preset("a100"), ep=8, dp=16,
                            config=TrainingConfig(routing_skew=1.0, routing_seed=1))
    assert trace.num_ranks == topology.world_size
    fast = play_on_fabric(trace, FlowEngine(FabricNetwork(topology)))
    slow = play_on_fabric(trace, RouteByRouteEngine(FabricNetwork(topology)))
    assert fast.ranks == slow.ranks
    assert fast.spans == slow.spans
    # uneven routing: the ranks' op durations differ (their iterations meet at the last all-reduce)
    durations = {tuple(round(e - s) for _, s, e in spans) for spans in fast.spans}
    assert len(durations) > 1
