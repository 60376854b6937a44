"""The max-min fill by levels (issue #36 item 6): the pure reference (fairshare.max_min_levels) against progressive
filling (fairshare.max_min_rates_compacting) to a relative 1e-12 on random cases; the compiled fill
(fairshare_levels.pxi, ``LiveRates.levels``) against the reference from scratch, bit for bit, after random removals
and additions (each refilling only a region: fairshare_levels_add.pxi), with flow contention and capacities changed;
whole plays on it (pure)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from genie.core.topology import LinkShape
from genie.topology.builders import star
from genie.workloads.generators import TrainingConfig, expert_parallel, pipeline_parallel
from genie.workloads.presets import device_preset, model_preset

from astra_adapter.fabric.fairshare import LiveRates, level_key, max_min_levels, max_min_rates_compacting
from astra_adapter.fabric.flat_flows import FlatFlowEngine
from astra_adapter.fabric.flows import FabricParams, FlowEngine
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from benchmarks.fabric_accuracy import three_tier
from fabric_cases import fabric as small_fabric, moe
from test_fabric_rates_compiled import RoundsFlatFlowEngine, _same_play as same_play

REL = 1e-12


def big_fabric():
    return three_tier(hosts_per_leaf=8, leaves_per_pod=4, pods=2, aggs_per_pod=2, cores=2, ranks_per_host=1)


def groups_and_ring(rng, network: FabricNetwork, ring: float = 0.5) -> np.ndarray:
    """Routes of a few all-to-all groups of random hosts (flows repeated on some routes) and, at odds ``ring``, a
    ring over every host that joins them into one component (test_fabric_fill.py's cases)."""
    n = network.world_size
    pairs = []
    for _ in range(int(rng.integers(1, 6))):
        hosts = rng.choice(n, size=int(rng.integers(3, 12)), replace=False).tolist()
        pairs += [(a, b) for a in hosts for b in hosts if a != b and rng.random() < 0.8]
    if rng.random() < ring:
        pairs += [(h, (h + 1) % n) for h in range(n)]
    pairs += [pairs[int(k)] for k in rng.integers(0, len(pairs), size=len(pairs) // 4)]
    return np.array([network.route(a, b) for a, b in pairs], dtype=np.int64)


def random_table(rng, num_links: int, num_routes: int, nice: bool):
    """Random routes (1-5 links each, ascending, weights 1, 1/2, 1/4 or random) as a CSR table, and capacities
    (a few round values with many exact ties, or random floats)."""
    ptr, res, w = [0], [], []
    for _ in range(num_routes):
        links = np.sort(rng.choice(num_links, size=int(rng.integers(1, min(5, num_links) + 1)), replace=False))
        res += links.tolist()
        w += (rng.choice([1.0, 1.0, 1.0, 0.5, 0.25], size=len(links)) if nice else
              rng.uniform(0.1, 1.0, size=len(links))).tolist()
        ptr.append(len(res))
    capacity = rng.choice([1.0, 1.0, 2.0, 4.0, 10.0, 1.25], size=num_links) if nice else \
        rng.uniform(0.5, 20.0, size=num_links)
    return np.array(ptr, dtype=np.int64), np.array(res, dtype=np.int64), np.array(w), capacity


def compacting(ids, mult, ptr, res, w, capacity, contention):
    """Progressive filling of the same routes (FlowEngine._solve's incidence and contention scaling)."""
    flow_of, resource_of, weight = [], [], []
    for i, r in enumerate(ids.tolist()):
        for e in range(ptr[r], ptr[r + 1]):
            flow_of.append(i), resource_of.append(res[e]), weight.append(w[e] * mult[i])
    resource_of, weight = np.array(resource_of, dtype=np.int64), np.array(weight)
    if contention > 0:
        flows_on = np.bincount(resource_of, weights=weight, minlength=len(capacity))
        capacity = capacity / (1 + contention * np.maximum(flows_on - 1, 0))
    return max_min_rates_compacting(np.array(flow_of, dtype=np.int64), resource_of, weight, capacity, len(ids))


def relative_gap(got: np.ndarray, want: np.ndarray) -> float:
    assert np.array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    return float(np.max(np.abs(got[finite] - want[finite]) / want[finite], initial=0.0))


def test_a_key_is_kept_above_the_last_event_on_its_resource():
    assert level_key(2.0, 3, (1.0, 5)) == (2.0, 3)
    assert level_key(1.0, 7, (1.0, 5)) == (1.0, 7)  # the same level, a larger resource: after it
    assert level_key(0.5, 7, (1.0, 5)) == (1.0, 7)
    assert level_key(1.0, 3, (1.0, 5)) == (math.nextafter(1.0, math.inf), 3)  # a smaller one: the next float up
    assert level_key(0.0, 0, (0.0, -1)) == (0.0, 0)


@pytest.mark.parametrize("contention", [0.0, 0.05])
@pytest.mark.parametrize("seed", [None, 4])
def test_the_reference_fill_by_levels_is_progressive_filling_on_a_fabric(contention, seed):
    network = FabricNetwork(big_fabric(), hash_seed=seed)
    engine = FlowEngine(network, FabricParams(flow_contention=contention))
    rng = np.random.default_rng(9)
    worst, levels = 0.0, 0
    for _ in range(25):
        routes = groups_and_ring(rng, network)
        ids, mult = np.unique(routes, return_counts=True)
        ptr, res, w = engine._route_table(len(network.routes) - 1)
        got = max_min_levels(ids, mult, ptr, res, w, engine.capacity, contention)
        worst = max(worst, relative_gap(got, compacting(ids, mult, ptr, res, w, engine.capacity, contention)))
        levels = max(levels, len(np.unique(got)))
    assert worst < REL and levels > 5


@pytest.mark.parametrize("nice", [True, False])
def test_the_reference_fill_by_levels_is_progressive_filling_on_random_routes(nice):
    """Many exact ties (round capacities and weights) or none (random floats); flows repeated on routes."""
    rng = np.random.default_rng(5 if nice else 6)
    worst = 0.0
    for _ in range(150):
        num_links = int(rng.integers(10, 80))
        ptr, res, w, capacity = random_table(rng, num_links, int(rng.integers(5, 200)), nice)
        ids = np.flatnonzero(rng.random(len(ptr) - 1) < 0.8).astype(np.int64)
        mult = rng.choice([1, 1, 1, 2, 3], size=len(ids)).astype(np.int64)
        contention = float(rng.choice([0.0, 0.0, 0.05]))
        keys: list = []
        got = max_min_levels(ids, mult, ptr, res, w, capacity, contention, keys)
        worst = max(worst, relative_gap(got, compacting(ids, mult, ptr, res, w, capacity, contention)))
        for i, (x, q) in enumerate(keys):
            assert x == got[i] and (q in res[ptr[ids[i]]:ptr[ids[i] + 1]].tolist() or math.isinf(x))
    assert worst < REL


compiled = pytest.mark.skipif(LiveRates is None, reason="astra_adapter.fabric.fairshare_core is not built")


class Flows:
    """Flows on routes of a CSR table, started and ended at random, solved by LiveRates(levels=True) as the flat
    engine drives it, each solve checked against the reference from scratch, bit for bit."""

    def __init__(self, live, capacity, contention, table) -> None:
        self.live, self.capacity, self.contention, self.table = live, capacity, contention, table
        self.routes = np.zeros(0, dtype=np.int64)
        self.active = np.zeros(0, dtype=np.uint8)
        self.solves = 0

    def start(self, routes: np.ndarray) -> None:
        self.routes = np.concatenate((self.routes, routes))
        self.active = np.concatenate((self.active, np.ones(len(routes), dtype=np.uint8)))

    def end(self, rng, most: int) -> None:
        moving = np.flatnonzero(self.active)
        self.active[moving[rng.integers(0, len(moving), size=int(rng.integers(1, most + 1)))]] = 0

    def check(self) -> None:
        ptr, res, w = self.table()
        self.live.set_moving(self.routes, self.active, len(ptr) - 1)
        self.live.solve(ptr, res, w)
        ids, counts, rates = self.live.moving_routes()
        want = max_min_levels(ids, counts, ptr, res, w, self.capacity, self.contention)
        assert np.array_equal(rates, want), np.flatnonzero(rates != want)
        self.solves += 1


def fabric_flows(contention: float, seed, add_fill: bool = True):
    network = FabricNetwork(big_fabric(), hash_seed=seed)
    engine = FlowEngine(network, FabricParams(flow_contention=contention))
    live = LiveRates(engine.capacity, contention, True)
    live.add_fill = add_fill
    return network, engine, Flows(live, engine.capacity.copy(), contention,
                                  lambda: engine._route_table(len(network.routes) - 1))


@compiled
@pytest.mark.parametrize("contention", [0.0, 0.05])
@pytest.mark.parametrize("seed", [None, 4])
def test_the_compiled_fill_by_levels_after_flows_end_is_the_reference_from_scratch(contention, seed):
    """Flows end a few at a time (some on routes other flows still take): each refill gives the floats of the
    reference's fill from scratch; most solves are refills of a region, none has an event before k*."""
    network, _, flows = fabric_flows(contention, seed)
    rng = np.random.default_rng(13)
    for _ in range(5):
        flows.start(groups_and_ring(rng, network))
        while flows.active.any():
            flows.check()
            flows.end(rng, 40)
    live = flows.live
    assert flows.solves > 40 and live.refills > 0.7 * flows.solves and live.levels_early == 0
    assert live.routes_filled > 0


def started_refills(live, add_fill: bool, most: int = 10) -> None:
    """After flows started: regions refilled (``add_fill``), else components filled from scratch."""
    assert live.refills > 10 and live.levels_early == 0
    if add_fill:
        assert live.add_refills > most and live.components_solved == 0
    else:
        assert live.add_refills == 0 and live.components_solved > most


@compiled
@pytest.mark.parametrize("contention", [0.0, 0.05])
@pytest.mark.parametrize("add_fill", [True, False])
def test_the_compiled_fill_by_levels_with_flows_starting_and_ending_is_the_reference(contention, add_fill):
    network, _, flows = fabric_flows(contention, 2, add_fill)
    rng = np.random.default_rng(17)
    for _ in range(60):
        if not flows.active.any() or rng.random() < 0.25:
            flows.start(groups_and_ring(rng, network)[:int(rng.integers(1, 60))])
        else:
            flows.end(rng, 20)
        flows.check()
    started_refills(flows.live, add_fill)


@compiled
@pytest.mark.parametrize("contention", [0.0, 0.05])
@pytest.mark.parametrize("seed", [None, 4])
@pytest.mark.parametrize("add_fill", [True, False])
def test_the_compiled_fill_by_levels_with_flows_starting_and_ending_at_once_is_the_reference(contention, seed,
                                                                                             add_fill):
    """Flows start and others end before one solve (a ring's step ends and its next starts): the region above
    where the started flows change the fill refilled (or, without ``add_fill``, the changed routes' components
    from scratch); solves where flows only end refill their region."""
    network, _, flows = fabric_flows(contention, seed, add_fill)
    rng = np.random.default_rng(23)
    flows.start(groups_and_ring(rng, network, ring=0.0))
    for _ in range(80):
        if flows.active.any():
            flows.end(rng, 30)
        fresh = groups_and_ring(rng, network, ring=0.1)
        flows.start(fresh[rng.random(len(fresh)) < rng.choice([0.0, 0.02, 0.1])])
        flows.check()
    started_refills(flows.live, add_fill)


@compiled
@pytest.mark.parametrize("contention", [0.0, 0.05])
def test_the_compiled_fill_by_levels_with_capacities_changed_is_the_reference(contention):
    """New capacities (HTB's credit) between solves: the components holding them filled again from scratch."""
    network, engine, flows = fabric_flows(contention, None)
    rng = np.random.default_rng(19)
    flows.start(groups_and_ring(rng, network))
    flows.start(groups_and_ring(rng, network))
    while flows.active.any():
        if rng.random() < 0.3:
            links = rng.integers(0, len(flows.capacity), size=8)
            flows.capacity[links] = engine.capacity[links] * rng.choice([0.5, 1.0, 2.0], size=8)
            flows.live.set_capacity(flows.capacity)
        flows.check()
        flows.end(rng, 30)
    assert flows.solves > 20 and flows.live.levels_early == 0


@compiled
@pytest.mark.parametrize("nice", [True, False])
def test_the_compiled_fill_by_levels_on_random_routes_is_the_reference(nice):
    """Random routes (many exact ties, or none), flows repeated on routes, ended one class at a time (the routes at
    the highest level, as a ring step's fastest flows end first) or at random."""
    rng = np.random.default_rng(21 if nice else 22)
    refills = 0
    for _ in range(40):
        table = random_table(rng, int(rng.integers(10, 80)), int(rng.integers(5, 200)), nice)
        ptr, res, w, capacity = table
        contention = float(rng.choice([0.0, 0.0, 0.05]))
        flows = Flows(LiveRates(capacity, contention, True), capacity, contention, lambda: table[:3])
        ids = np.flatnonzero(rng.random(len(ptr) - 1) < 0.8)
        flows.start(np.repeat(ids, rng.choice([1, 1, 1, 2, 3], size=len(ids))).astype(np.int64))
        while flows.active.any():
            flows.check()
            if rng.random() < 0.4:
                _, _, rates = flows.live.moving_routes()
                top = rates[np.isfinite(rates)].max(initial=0.0)
                on_top = np.isin(flows.routes, flows.live.moving_routes()[0][rates >= top]) & (flows.active > 0)
                flows.active[np.flatnonzero(on_top)[:int(rng.integers(1, on_top.sum() + 1))]] = 0
            else:
                flows.end(rng, max(1, int(flows.active.sum()) // 10))
        refills += flows.live.refills
        assert flows.live.levels_early == 0
    assert refills > 300


@compiled
@pytest.mark.parametrize("nice", [True, False])
def test_the_compiled_fill_by_levels_after_random_batches_is_the_reference(nice):
    """Random routes (many exact ties, or none), flows repeated on routes; batches of flows starting, ending, both,
    or new capacities (with flows starting) before each solve: every solve the reference from scratch, bit for bit,
    and the same floats with the additions' components filled from scratch (``add_fill`` off)."""
    rng = np.random.default_rng(31 if nice else 32)
    added = 0
    for _ in range(25):
        table = random_table(rng, int(rng.integers(3, 60)), int(rng.integers(3, 150)), nice)
        ptr, res, w, capacity = table
        contention = float(rng.choice([0.0, 0.0, 0.05, 0.5]))
        flows = Flows(LiveRates(capacity, contention, True), capacity.copy(), contention, lambda: table[:3])
        scratch = LiveRates(capacity, contention, True)
        scratch.add_fill = False
        num_routes = len(ptr) - 1
        for _ in range(30):
            kind = rng.random()
            moving = np.flatnonzero(flows.active)
            if kind < 0.85 or not len(moving):
                if kind < 0.35 or not len(moving):  # flows start
                    flows.start(rng.integers(0, num_routes, size=int(rng.integers(1, max(2, num_routes // 6)))))
                elif kind < 0.55:  # flows end
                    flows.end(rng, max(1, len(moving) // 6))
                else:  # both
                    flows.end(rng, max(1, len(moving) // 8))
                    flows.start(rng.integers(0, num_routes, size=int(rng.integers(1, max(2, num_routes // 8)))))
            else:  # new capacities, and a few flows start
                links = rng.integers(0, len(capacity), size=int(rng.integers(1, 4)))
                flows.capacity[links] = capacity[links] * rng.choice([0.5, 1.0, 1.5, 2.0], size=len(links))
                flows.live.set_capacity(flows.capacity)
                scratch.set_capacity(flows.capacity)
                flows.start(rng.integers(0, num_routes, size=2))
            flows.check()
            scratch.set_moving(flows.routes, flows.active, num_routes)
            scratch.solve(*table[:3])
            assert all(np.array_equal(a, b) for a, b in zip(scratch.moving_routes(), flows.live.moving_routes()))
        assert flows.live.levels_early == 0
        added += flows.live.add_refills
    assert added > 200


class LevelsEngine(FlatFlowEngine):
    level_fill = True


class LevelsPythonLoopEngine(LevelsEngine):
    compiled_loop = False


class ScratchAddsEngine(LevelsEngine):
    add_fill = False


PARAMS = [FabricParams(), FabricParams(flow_contention=0.05),
          FabricParams(message_overhead_ns=3000.0, endpoint_delay_ns=20000.0)]


def _levels_play(trace, network, params):
    """A play filled by levels on the compiled loop and on the Python loop (bit for bit), and on the fill by
    rounds (every time within a relative 1e-9); the play filled by levels."""
    engine = LevelsEngine(network, params)
    got = play_on_fabric(trace, engine)
    python = LevelsPythonLoopEngine(network, params)
    want = play_on_fabric(trace, python)
    assert got.spans == want.spans and got.ranks == want.ranks
    assert engine.solves == python.solves and engine.events == python.events
    assert engine._live.refills == python._live.refills > 0 and engine._live.levels_early == 0
    assert engine._live.add_refills == python._live.add_refills > 0
    scratch = ScratchAddsEngine(network, params)  # the components flows join filled from scratch: the same floats
    again = play_on_fabric(trace, scratch)
    assert got.spans == again.spans and got.ranks == again.ranks
    assert scratch._live.add_refills == 0 and scratch._live.components_solved > 0
    same_play(got, play_on_fabric(trace, RoundsFlatFlowEngine(network, params)))
    return got


@compiled
@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("seed", [None, 2])
def test_an_uneven_moe_play_filled_by_levels(params, seed):
    _levels_play(moe(seed=1 if seed is None else seed), FabricNetwork(small_fabric(), hash_seed=seed), params)


@compiled
def test_a_pipeline_with_data_parallelism_filled_by_levels():
    model = model_preset("gpt3-1.3b").with_overrides(num_layers=4)
    trace = pipeline_parallel(model, device_preset("a100"), pp=4, dp=4, config=TrainingConfig(micro_batches=4))
    _levels_play(trace, FabricNetwork(small_fabric(), hash_seed=1), FabricParams(message_overhead_ns=3000.0))


@compiled
def test_a_play_with_the_credit_filled_by_levels():
    """HTB's credit changes capacities as the buckets' modes change (set_capacity: components from scratch)."""
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=1)
    trace = expert_parallel(model, device_preset("a100"), ep=8, dp=8,
                            config=TrainingConfig(routing_skew=1.0, routing_seed=3))
    network = FabricNetwork(star(8, shape=LinkShape(rate_bps=1_000_000_000)))
    params = FabricParams(htb_credit=True)
    engine = LevelsEngine(network, params)
    got = play_on_fabric(trace, engine)
    assert engine.credit is not None and engine._live.levels
    same_play(got, play_on_fabric(trace, RoundsFlatFlowEngine(network, params)))
    same_play(got, play_on_fabric(trace, FlowEngine(network, params)))


@compiled
def test_a_bigger_moe_play_filled_by_levels_is_the_reference_engines():
    topology = three_tier(hosts_per_leaf=4, leaves_per_pod=2, pods=4, aggs_per_pod=2, cores=2, ranks_per_host=1)
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=1)
    trace = expert_parallel(model, device_preset("a100"), ep=8, dp=32,
                            config=TrainingConfig(routing_skew=1.0, routing_seed=5))
    network = FabricNetwork(topology, hash_seed=7)
    params = FabricParams(flow_contention=0.02)
    same_play(_levels_play(trace, network, params), play_on_fabric(trace, FlowEngine(network, params)))
