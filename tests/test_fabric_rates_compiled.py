"""The flat engine's compiled rate solve (astra_adapter/fabric/fairshare_core.pyx), on random sets of moving flows on
3-tier fabrics (expected ECMP shares and hash draws, with and without flow contention, flows repeated on one route,
flows that ended) and whole plays (pure):

- as one solve of every moving flow (``by_component=False``): the numpy path's rates, bit for bit;
- per connected component, incrementally (the default): each component's rates bit for bit those the numpy solve
  gives that component's flows alone, whatever the calls before it kept; within a relative 1e-9 of the one solve;
  and whole plays (uneven MoE, random concurrent collectives, a pipeline with data parallelism) within a relative
  1e-9 of the reference engine's times;
- incrementally with the moving routes kept between events (``LiveRates``, the flat engine's default): every
  rate MovingRates' per-component solve gives, bit for bit, so whole plays are the same floats."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from genie.workloads.generators import TrainingConfig, expert_parallel, pipeline_parallel
from genie.workloads.presets import device_preset, model_preset

from astra_adapter.fabric.fairshare import LiveRates, MovingRates, earliest_end_ns
from astra_adapter.fabric.flat_flows import FlatFlowEngine
from astra_adapter.fabric.flows import FabricParams, FlowEngine, run_concurrently
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from benchmarks.fabric_accuracy import three_tier
from test_fabric_flat_engine import PARAMS, _random_ops

pytestmark = pytest.mark.skipif(MovingRates is None and not os.environ.get("CI"),
                                reason="astra_adapter.fabric.fairshare_core is not built (pip install -e . builds it)")

REL = 1e-9  # the per-component solve against the one solve of every flow (the reference's)


class NumpyFlatFlowEngine(FlatFlowEngine):
    compiled_solve = False


class OneSolveFlatFlowEngine(FlatFlowEngine):
    by_component = False


class WalkFlatFlowEngine(FlatFlowEngine):
    incremental = False  # MovingRates per component: every moving flow walked at every solve


class RoundsFlatFlowEngine(FlatFlowEngine):
    level_fill = False  # LiveRates filling by rounds, as MovingRates does (the default fills by levels: within ~1e-14)


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


def _components(engine: FlowEngine, routes: np.ndarray, active: np.ndarray) -> list[np.ndarray]:
    """The moving flows grouped by connected component (flows joined where their routes load a common resource)."""
    ptr, res, _ = engine._route_table(len(engine.network.routes) - 1)
    parent = list(range(len(engine.capacity)))

    def root(q: int) -> int:
        while parent[q] != q:
            q = parent[q]
        return q

    for r in set(routes[active].tolist()):
        for q in res[ptr[r] + 1:ptr[r + 1]].tolist():
            a, b = root(int(res[ptr[r]])), root(q)
            if a != b:
                parent[b] = a
    groups: dict[int, list[int]] = {}
    for f in np.flatnonzero(active).tolist():
        r = int(routes[f])
        groups.setdefault(root(int(res[ptr[r]])) if ptr[r + 1] > ptr[r] else -1 - f, []).append(f)
    return [np.array(g) for g in groups.values()]


def _random_flows(rng, network: FabricNetwork, flows: int) -> np.ndarray:
    n = network.world_size
    pairs = rng.integers(0, n, size=(flows, 2))
    pairs[:, 1] = np.where(pairs[:, 0] == pairs[:, 1], (pairs[:, 1] + 1) % n, pairs[:, 1])
    if flows:
        pairs[rng.random(flows) < 0.3] = pairs[0]  # flows repeated on one route
    return np.array([network.route(int(a), int(b)) for a, b in pairs], dtype=np.int64)


def _group_starts(rng, network: FabricNetwork, routes: np.ndarray, active: np.ndarray, most_hosts: int = 4):
    """A group of flows starts (2 to `most_hosts` hosts talking among themselves): the arrays with its flows."""
    hosts = rng.choice(network.world_size, size=int(rng.integers(2, most_hosts + 1)), replace=False)
    pairs = [(int(a), int(b)) for a in hosts for b in hosts if a != b and rng.random() < 0.7]
    return (np.concatenate([routes, np.array([network.route(a, b) for a, b in pairs], dtype=np.int64)]),
            np.concatenate([active, np.ones(len(pairs), dtype=active.dtype)]))


def _live_and_walk(hash_seed: int | None, contention: float):
    """A fabric's network, its reference engine, and on its capacities LiveRates and MovingRates (per component),
    with no flow yet (routes, moving flags)."""
    network = FabricNetwork(fabric(), hash_seed=hash_seed)
    engine = FlowEngine(network, FabricParams(flow_contention=contention))
    return (network, engine, LiveRates(engine.capacity, contention), MovingRates(engine.capacity, contention),
            np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8))


def _group_leaves(rng, routes: np.ndarray, active: np.ndarray):
    """A group leaves: its flows drop out of the arrays."""
    keep = np.ones(len(routes), dtype=bool)
    keep[int(rng.integers(0, len(routes))):][:int(rng.integers(1, 8))] = False
    return routes[keep], active[keep]


@pytest.mark.parametrize("contention", [0.0, 0.05])
@pytest.mark.parametrize("seed", [None, 3])
def test_the_compiled_one_solve_gives_the_numpy_rates_bit_for_bit(contention, seed):
    network = FabricNetwork(fabric(), hash_seed=seed)
    engine = FlowEngine(network, FabricParams(flow_contention=contention))
    solve = MovingRates(engine.capacity, contention, False)
    rng = np.random.default_rng(7)
    for _ in range(150):
        flows = int(rng.integers(0, 60))
        routes = _random_flows(rng, network, flows)
        active = rng.random(flows) < 0.8
        want = _numpy_rates(engine, routes, active)
        ptr, res, w = engine._route_table(len(network.routes) - 1)
        got = solve.rates(routes, active.view(np.uint8), ptr, res, w)
        assert np.array_equal(got, want)
        assert not got[~active].any()


@pytest.mark.parametrize("ranks_per_host, ways, seed", [(1, 2, 5), (2, 2, 5), (1, 3, None)])
def test_the_one_solve_on_a_bound_table_gives_the_numpy_rates_bit_for_bit(ranks_per_host, ways, seed):
    """rates_bound (the chain engine's call: the route table bound once, re-bound as it grows, the moving flags
    one ``bytes``) gives the numpy path's rates, on sets of up to ~2,500 flows (the kept working space grown
    past its first size), with routes between two ranks of one host among them; before a table is bound it
    refuses. With ``ways`` 3 and the expected ECMP share (seed None) the loads are thirds, whose sums depend on
    their order: the routes must be solved in ascending order, as np.unique gives them."""
    network = FabricNetwork(three_tier(hosts_per_leaf=4, leaves_per_pod=2, pods=2, aggs_per_pod=ways, cores=ways,
                                       ranks_per_host=ranks_per_host), hash_seed=seed)
    engine = FlowEngine(network, FabricParams())
    solve = MovingRates(engine.capacity, 0.0, False)
    with pytest.raises(ValueError, match="bind_table"):
        solve.rates_bound(np.zeros(1, dtype=np.int64), b"\x01")
    rng = np.random.default_rng(11)
    bound = None
    for k in range(60):
        flows = int(rng.integers(0, 2500 if k % 10 == 9 else 80))
        routes = _random_flows(rng, network, flows)
        active = rng.random(flows) < 0.8
        ptr, res, w = engine._route_table(len(network.routes) - 1)
        if ptr is not bound:
            solve.bind_table(ptr, res, w)
            bound = ptr
        got = solve.rates_bound(routes, active.view(np.uint8).tobytes())
        assert np.array_equal(got, _numpy_rates(engine, routes, active))
        assert np.array_equal(got, solve.rates(routes, active.view(np.uint8), ptr, res, w))
        assert not got[~active].any()


@pytest.mark.parametrize("contention", [0.0, 0.05])
@pytest.mark.parametrize("seed", [None, 3])
def test_the_component_solve_gives_each_components_own_rates_bit_for_bit(contention, seed):
    """Sequences as a play makes them: flows end one by one, groups of flows come and go, so most calls keep
    some components' rates and solve the others; each component's rates must be the numpy solve of it alone."""
    network = FabricNetwork(fabric(), hash_seed=seed)
    engine = FlowEngine(network, FabricParams(flow_contention=contention))
    solve = MovingRates(engine.capacity, contention)
    rng = np.random.default_rng(11)
    routes = _random_flows(rng, network, 0)
    active = np.zeros(0, dtype=bool)
    apart = 0
    for _ in range(200):
        change = int(rng.integers(0, 4))
        if change == 0 or not active.any():
            routes, active = _group_starts(rng, network, routes, active)
        elif change == 1:
            routes, active = _group_leaves(rng, routes, active)
        else:  # flows end
            moving = np.flatnonzero(active)
            active = active.copy()
            active[rng.choice(moving, size=min(len(moving), int(rng.integers(1, 3))), replace=False)] = False
        ptr, res, w = engine._route_table(len(network.routes) - 1)
        got = solve.rates(routes, active.view(np.uint8), ptr, res, w)
        assert not got[~active].any()
        for flows in _components(engine, routes, active):
            alone = np.zeros(len(routes), dtype=bool)
            alone[flows] = True
            assert np.array_equal(got[flows], _numpy_rates(engine, routes, alone)[flows])
        whole = _numpy_rates(engine, routes, active)
        assert np.allclose(got, whole, rtol=REL, atol=0)
        apart += len(_components(engine, routes, active)) > 1
    assert apart > 50  # the sequences had several components to solve apart
    assert solve.components_kept > 100 and solve.components_solved > 100  # both paths ran, many times


def _close(got: float, want: float) -> bool:
    return math.isclose(got, want, rel_tol=REL, abs_tol=1e-6)


def _same_play(got, want) -> None:
    """Two timelines of one trace: the same nodes on every rank, every start and end within REL; the per-rank
    totals (whole ns) within REL or 1 ns of rounding."""
    assert len(got.spans) == len(want.spans)
    for g, w in zip(got.spans, want.spans):
        assert [n for n, _, _ in g] == [n for n, _, _ in w]
        assert all(_close(gs, ws) and _close(ge, we) for (_, gs, ge), (_, ws, we) in zip(g, w))
    for g, w in zip(got.ranks, want.ranks):
        for field in ("iteration_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "overlap_ns"):
            a, b = getattr(g, field), getattr(w, field)
            assert abs(a - b) <= max(1, REL * abs(b)), (field, a, b)


def _moe(seed: int = 3, dp: int = 16):
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=2)
    return expert_parallel(model, device_preset("a100"), ep=8, dp=dp,
                           config=TrainingConfig(routing_skew=1.0, routing_seed=seed))


@pytest.mark.parametrize("params", [FabricParams(), FabricParams(flow_contention=0.05)])
def test_a_moe_play_with_the_compiled_one_solve_is_the_numpy_one(params):
    trace = _moe()
    network = FabricNetwork(fabric(), hash_seed=1)
    compiled = OneSolveFlatFlowEngine(network, params)
    assert compiled._compiled is not None
    want = play_on_fabric(trace, NumpyFlatFlowEngine(network, params))
    got = play_on_fabric(trace, compiled)
    assert got.ranks == want.ranks
    assert got.spans == want.spans
    assert compiled.solves > 10


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("seed", [None, 2])
def test_an_uneven_moe_play_by_component_is_the_references_within_a_tolerance(params, seed):
    trace = _moe(seed=1)
    network = FabricNetwork(fabric(), hash_seed=seed)
    engine = WalkFlatFlowEngine(network, params)
    got = play_on_fabric(trace, engine)
    _same_play(got, play_on_fabric(trace, FlowEngine(network, params)))
    solve = engine._compiled
    assert solve.components_kept > 0 and solve.components_solved > engine.solves  # solved apart, and kept


@pytest.mark.parametrize("contention", [0.0, 0.05])
@pytest.mark.parametrize("seed", [None, 3])
def test_the_incremental_solve_gives_the_component_solves_rates_bit_for_bit(contention, seed):
    """Sequences as the flat engine makes them: flows laid out again (groups start, leave, or are laid out twice
    before a solve), flows ending in a move; after each solve every moving flow's rate is MovingRates'
    per-component rate for the same flows, bit for bit, and each move the same floats as move_flows."""
    from astra_adapter.fabric.fairshare_core import move_flows

    network, engine, live, walk, routes, active = _live_and_walk(seed, contention)
    rng = np.random.default_rng(5)
    solved = moved = 0
    fresh = False  # solved since the flows were last laid out (the engine moves only then)
    for _ in range(300):
        change = int(rng.integers(0, 5))
        if change in (0, 1) or not active.any():  # a group of flows starts, or one leaves
            routes, active = _group_starts(rng, network, routes, active) if change == 0 or not active.any() else \
                _group_leaves(rng, routes, active)
            live.set_moving(routes, active, len(network.routes))
            fresh = False
        elif change == 2 and fresh:  # flows move, some end: the same floats as move_flows
            left = rng.random(len(routes)) * 1e6
            done_below = np.where(rng.random(len(routes)) < 0.2, 2e6, 0.0)
            starts = np.array([0, len(routes) // 2], dtype=np.int64) if len(routes) > 1 else \
                np.zeros(1, dtype=np.int64)
            want_left, want_active = left.copy(), active.copy()
            before = np.add.reduceat(active, starts, dtype=np.int64) if len(routes) else np.zeros(1, np.int64)
            want = move_flows(want_left, walk_rates, want_active, done_below, starts, 3.0)
            counts = before.copy()
            changed = live.move(left, active, done_below, starts, routes, counts, 3.0)
            assert np.array_equal(counts, want) and np.array_equal(active, want_active)
            assert changed == [(k, int(want[k])) for k in np.flatnonzero(want != before).tolist()]
            assert np.array_equal(left, want_left)
            moved += 1
            fresh = not changed  # flows ended: the engine solves before it moves again
        if rng.random() < 0.8:  # else laid out again (or moved) before the next solve
            ptr, res, w = engine._route_table(len(network.routes) - 1)
            live.solve(ptr, res, w)
            walk_rates = walk.rates(routes, active, ptr, res, w)
            assert np.array_equal(live.flow_rates(routes, active), walk_rates)
            if len(routes):
                assert live.earliest_end(np.full(len(routes), 7.0), active, routes) == \
                    earliest_end_ns(np.full(len(routes), 7.0), walk_rates, active)
            solved += 1
            fresh = True
    assert solved > 100 and moved > 20 and live.components_solved > 100


@pytest.mark.parametrize("contention", [0.0, 0.05])
def test_new_capacities_solve_again_the_components_they_touch(contention):
    """HTB's credit changes links' capacities mid-play (astra_adapter.fabric.credit): LiveRates.set_capacity marks
    the components holding a resource whose capacity changed, so every rate after the next solve is MovingRates'
    per-component rate at the new capacities (which solves every component again), bit for bit, the one solve's
    within REL - and the components it does not touch keep their rates (not solved again). moving_routes gives the
    moving routes as np.unique does, with their counts and rates."""
    network, engine, live, walk, routes, active = _live_and_walk(3, contention)
    base = engine.capacity.copy()
    rng = np.random.default_rng(17)
    changed = kept = 0
    for _ in range(250):
        change = int(rng.integers(0, 4))
        if change == 0 or not active.any():
            routes, active = _group_starts(rng, network, routes, active, most_hosts=3)
        elif change == 1:
            routes, active = _group_leaves(rng, routes, active)
        else:  # a few links change mode: the device's speed, the ceil or the rate (as the credit's modes)
            cap = engine.capacity.copy()
            some = rng.choice(len(cap), size=int(rng.integers(1, 4)), replace=False)
            cap[some] = base[some] * rng.choice([1.0, 1.02, 10.0], size=len(some))
            engine.capacity[:] = cap
            engine._rates.clear()  # the reference's memo is keyed on the modes, which this test does not keep
            live.set_capacity(cap)
            walk.set_capacity(cap)
            changed += 1
        live.set_moving(routes, active, len(network.routes))
        before = live.components_solved
        ptr, res, w = engine._route_table(len(network.routes) - 1)
        live.solve(ptr, res, w)
        want = walk.rates(routes, active, ptr, res, w)
        assert np.array_equal(live.flow_rates(routes, active), want)
        assert np.allclose(want, _numpy_rates(engine, routes, active.view(bool)), rtol=REL, atol=0)
        unique, counts, rates = live.moving_routes()
        want_unique, first, want_counts = np.unique(routes[active.view(bool)], return_index=True, return_counts=True)
        assert np.array_equal(unique, want_unique) and np.array_equal(counts, want_counts)
        assert np.array_equal(rates, want[active.view(bool)][first])
        kept += change >= 2 and live.components_solved - before < len(_components(engine, routes, active.view(bool)))
    assert changed > 50 and kept > 10  # capacities changed often, and often left some component alone


@pytest.mark.parametrize("params", PARAMS)
def test_an_uneven_moe_play_incrementally_is_the_component_solves_bit_for_bit(params):
    trace = _moe(seed=1)
    network = FabricNetwork(fabric(), hash_seed=2)
    engine = RoundsFlatFlowEngine(network, params)
    assert engine._live is not None
    got = play_on_fabric(trace, engine)
    want = play_on_fabric(trace, WalkFlatFlowEngine(network, params))
    assert got.spans == want.spans and got.ranks == want.ranks
    assert engine._live.components_solved > engine.solves  # components solved apart
    _same_play(play_on_fabric(trace, FlatFlowEngine(network, params)), want)  # filled by levels (the default)


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("seed", [None, 5])
def test_random_concurrent_collectives_by_component_end_when_the_reference_says(params, seed):
    rng = np.random.default_rng(3 if seed is None else seed)
    network = FabricNetwork(fabric(), hash_seed=seed)
    for _ in range(8):
        ops = _random_ops(rng, network.world_size)
        want = run_concurrently(FlowEngine(network, params), ops)
        got = run_concurrently(FlatFlowEngine(network, params), ops)
        assert len(got) == len(want) and all(_close(g, w) for g, w in zip(got, want))


def test_a_pipeline_with_data_parallelism_by_component_plays_as_the_reference():
    model = model_preset("gpt3-1.3b").with_overrides(num_layers=4)
    trace = pipeline_parallel(model, device_preset("a100"), pp=4, dp=4, config=TrainingConfig(micro_batches=4))
    network = FabricNetwork(fabric(), hash_seed=1)
    got = play_on_fabric(trace, RoundsFlatFlowEngine(network))
    _same_play(got, play_on_fabric(trace, FlowEngine(network)))
    _same_play(play_on_fabric(trace, FlatFlowEngine(network)), got)  # filled by levels (the default)
    walked = play_on_fabric(trace, WalkFlatFlowEngine(network))
    assert got.spans == walked.spans and got.ranks == walked.ranks  # the incremental solve: the same floats


def test_the_compiled_busy_ranks_are_the_steps_own():
    """busy_ranks_of (the flat engine's busy ranks of a last step, compiled) gives StepFlows.busy_of's set: the
    ranks of the flows that move and are above the done threshold, on random steps with flows not moving, done,
    just above the threshold and NaN left; int32 ranks are read as the same numbers."""
    from astra_adapter.fabric.fairshare import busy_ranks_of
    from astra_adapter.fabric.flat_flows import busy_arrays
    from astra_adapter.fabric.flows import StepFlows

    rng = np.random.default_rng(5)
    for k in range(300):
        n = int(rng.integers(0, 40))
        dtype = np.int32 if k % 3 == 0 else np.int64
        src = rng.integers(0, 16, size=n).astype(dtype)
        dst = rng.integers(0, 16, size=n).astype(dtype)
        sizes = np.where(rng.random(n) < 0.2, 0.0, rng.random(n) * 1e6)
        step = StepFlows(np.arange(n, dtype=np.int64), src, dst, sizes, 0.0)
        left = step.wire_bytes * rng.random(n)
        left[rng.random(n) < 0.2] = step.done_below  # at the threshold: done
        left[rng.random(n) < 0.1] = np.nextafter(step.done_below, np.inf)  # just above: busy
        left[rng.random(n) < 0.05] = np.nan
        want = step.busy_of(step.moving & (left > step.done_below))
        got = busy_ranks_of(*busy_arrays(step), left, step.done_below)
        assert got == want
        assert all(type(r) is int for r in got)
