"""The flat engine's flows kept in slots between events (astra_adapter/fabric/flat_slots.py) against the rebuilt
lay-out (``FlatFlowEngine.slots = False``: every flowing op's arrays concatenated again at each lay-out), both on
the incremental compiled solve: the same floats, bit for bit - random concurrent collectives (ring, direct, even
and uneven all-to-alls) and whole plays (uneven MoE, pipeline with data parallelism) with and without ECMP hash
draws, flow contention, message overhead and endpoint delay, with the slots' arrays compacted at every chance or
only when they grow (pure)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from genie.workloads.generators import TrainingConfig, expert_parallel, pipeline_parallel
from genie.workloads.presets import device_preset, model_preset

from astra_adapter.fabric import flat_slots
from astra_adapter.fabric.fairshare import LiveRates
from astra_adapter.fabric.flat_flows import FlatFlowEngine
from astra_adapter.fabric.flows import FabricParams, run_concurrently
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from benchmarks.fabric_accuracy import three_tier
from test_fabric_flat_engine import PARAMS, _random_ops

pytestmark = pytest.mark.skipif(LiveRates is None, reason="astra_adapter.fabric.fairshare_core is not built "
                                "(pip install -e . builds it): the slots run only on its incremental solve")


class RebuiltFlatFlowEngine(FlatFlowEngine):
    slots = False


class CountingFlowSlots(flat_slots.FlowSlots):
    """FlowSlots counting what it did."""

    compactions = reused = appended = 0

    def _compact(self, cap: int, slot_cap: int) -> None:
        CountingFlowSlots.compactions += 1
        super()._compact(cap, slot_cap)

    def place(self, op) -> None:
        k = op.slot
        if k >= 0 and self._len[k] == len(op.steps[op.step].routes):
            CountingFlowSlots.reused += 1
        else:
            CountingFlowSlots.appended += 1
        super().place(op)


def _checked(place_changed):
    """FlatFlowEngine._place_changed, then: every moving op's ``left`` and ``active`` are its slot, its count of
    moving flows the slot's, every other slot moves nothing, and the slots tile the arrays in order."""

    def checked(engine) -> None:
        place_changed(engine)
        slots = engine._slots
        ends = list(slots.starts[1:]) + [len(slots.left)]
        assert list(slots.starts) == sorted(slots.starts) and len(slots.ops) == len(slots.starts)
        flowing = 0
        for op, a, b, count in zip(slots.ops, slots.starts.tolist(), ends, slots.counts.tolist()):
            assert int(slots.active[a:b].sum()) == count
            # the slot's list: its moving flows, ascending (what the listed sweeps read and keep)
            assert not slots.listed_sweeps or np.array_equal(slots.listed[a:a + count],
                                                             a + np.flatnonzero(slots.active[a:b]))
            if op is not None and op.flowing:
                flowing += 1
                assert op in engine.ops and op.placed_step == op.step and count == op.active_count > 0
                assert op.left.base is slots.left.base and op.left.shape == (b - a,)
                assert np.shares_memory(op.left, slots.left[a:b]) and np.shares_memory(op.active, slots.active[a:b])
                assert np.array_equal(slots.routes[a:b], op.steps[op.step].routes)
            else:
                assert count == 0
        assert flowing == slots.flowing == sum(1 for op in engine.ops if op.flowing)

    return checked


def fabric():
    return three_tier(hosts_per_leaf=4, leaves_per_pod=2, pods=2, aggs_per_pod=2, cores=2, ranks_per_host=1)


@pytest.fixture(params=["grown", "compacted"])
def slots(request, monkeypatch):
    """The slots as they run, or compacted whenever a slot is given up (every dead slot dropped at once)."""
    monkeypatch.setattr(flat_slots, "FlowSlots", CountingFlowSlots)
    import astra_adapter.fabric.flat_flows as flat_flows
    monkeypatch.setattr(flat_flows, "FlowSlots", CountingFlowSlots)
    monkeypatch.setattr(FlatFlowEngine, "_place_changed", _checked(FlatFlowEngine._place_changed))
    if request.param == "compacted":
        monkeypatch.setattr(flat_slots, "_MIN_COMPACT", -1)
    CountingFlowSlots.compactions = CountingFlowSlots.reused = CountingFlowSlots.appended = 0
    return request.param


def _random_collectives_end_as(reference: type, params: FabricParams, rng_seed: int, hash_seed: int | None) -> None:
    """Ten sets of random concurrent collectives end on the estimates' flat engine bit for bit as on ``reference``
    (a flat engine with one of its ways turned off)."""
    rng = np.random.default_rng(rng_seed)
    network = FabricNetwork(fabric(), hash_seed=hash_seed)
    for _ in range(10):
        ops = _random_ops(rng, network.world_size)
        assert run_concurrently(FlatFlowEngine(network, params), ops) == run_concurrently(reference(network, params),
                                                                                           ops)


def test_the_estimates_engine_keeps_its_flows_in_slots():
    engine = FlatFlowEngine(FabricNetwork(fabric()))
    assert engine._slots is not None and RebuiltFlatFlowEngine(FabricNetwork(fabric()))._slots is None


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("seed", [None, 5])
def test_random_concurrent_collectives_in_slots_end_as_rebuilt(slots, params, seed):
    _random_collectives_end_as(RebuiltFlatFlowEngine, params, 7 if seed is None else seed, seed)
    assert CountingFlowSlots.reused > 10 and CountingFlowSlots.appended > 10


def _moe(seed: int, layers: int = 2):
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=layers)
    return expert_parallel(model, device_preset("a100"), ep=8, dp=16,
                           config=TrainingConfig(routing_skew=1.0, routing_seed=seed))


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("seed", [None, 2])
def test_an_uneven_moe_play_in_slots_is_the_rebuilt_one(slots, params, seed):
    trace = _moe(seed=1 if seed is None else seed)
    network = FabricNetwork(fabric(), hash_seed=seed)
    engine = FlatFlowEngine(network, params)
    got = play_on_fabric(trace, engine)
    rebuilt = RebuiltFlatFlowEngine(network, params)
    want = play_on_fabric(trace, rebuilt)
    assert got.spans == want.spans and got.ranks == want.ranks  # every node's start and end, bit for bit
    assert engine.solves == rebuilt.solves
    assert CountingFlowSlots.reused > 100 and CountingFlowSlots.appended > 30
    assert CountingFlowSlots.compactions > (10 if slots == "compacted" else 0)


def test_a_pipeline_with_data_parallelism_in_slots_plays_as_rebuilt(slots):
    model = model_preset("gpt3-1.3b").with_overrides(num_layers=4)
    trace = pipeline_parallel(model, device_preset("a100"), pp=4, dp=4, config=TrainingConfig(micro_batches=4))
    network = FabricNetwork(fabric(), hash_seed=1)
    params = FabricParams(message_overhead_ns=3000.0)
    got = play_on_fabric(trace, FlatFlowEngine(network, params))
    want = play_on_fabric(trace, RebuiltFlatFlowEngine(network, params))
    assert got.spans == want.spans and got.ranks == want.ranks


class CollectorWatchingEngine(FlatFlowEngine):
    """Records whether the cyclic collector was on as each op started."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.collector_on: list[bool] = []

    def start(self, steps):
        self.collector_on.append(gc.isenabled())
        return super().start(steps)


def test_the_collector_is_paused_during_a_play_and_left_as_it_was():
    model = model_preset("gpt3-1.3b").with_overrides(num_layers=2)
    trace = pipeline_parallel(model, device_preset("a100"), pp=2, dp=2, config=TrainingConfig(micro_batches=2))
    network = FabricNetwork(fabric(), hash_seed=1)
    assert gc.isenabled()
    engine = CollectorWatchingEngine(network)
    paused = play_on_fabric(trace, engine)
    assert engine.collector_on and not any(engine.collector_on) and gc.isenabled()
    assert paused.spans == play_on_fabric(trace, RebuiltFlatFlowEngine(network)).spans
    gc.disable()  # off before the play (a caller's own pause): still off after it
    try:
        play_on_fabric(trace, FlatFlowEngine(network))
        assert not gc.isenabled()
    finally:
        gc.enable()


def _random_slots(seed: int, pairs: int, cuts: int, p_moving: float, p_idle: float):
    """Random flows on a 3-tier fabric cut into slots: (rng, network, a reference engine, routes, slot starts,
    moving flags - some slots idle, every flag 0 -, per slot its count of moving flows)."""
    from astra_adapter.fabric.flows import FlowEngine

    rng = np.random.default_rng(seed)
    network = FabricNetwork(fabric(), hash_seed=seed)
    engine = FlowEngine(network, FabricParams())
    hosts = network.world_size
    routes = np.array([network.route(int(a), int(b)) for a, b in rng.integers(0, hosts, size=(pairs, 2)) if a != b],
                      dtype=np.int64)
    n = len(routes)
    starts = np.unique(np.concatenate([[0], rng.integers(0, n, size=cuts)])).astype(np.int64)
    active = (rng.random(n) < p_moving).astype(np.uint8)
    for a, b in zip(starts.tolist(), starts[1:].tolist() + [n]):
        if rng.random() < p_idle:
            active[a:b] = 0  # an idle slot
    return rng, network, engine, routes, starts, active, np.add.reduceat(active, starts, dtype=np.int64)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sweeps_skip_the_slots_moving_nothing_with_the_same_floats(seed):
    """LiveRates.earliest_end_of and move over slots, some idle (every flag 0, count 0): the minimum and the moves
    of the sweeps over every flow."""
    from astra_adapter.fabric.fairshare_core import move_flows

    rng, network, engine, routes, starts, active, counts = _random_slots(seed, 300, 40, 0.6, 0.3)
    n = len(routes)
    assert (counts == 0).sum() > 3 and (counts > 0).sum() > 3
    live = LiveRates(engine.capacity, 0.0)
    live.count_flows(routes, active, 0, n, 1, len(network.routes))
    ptr, res, w = engine._route_table(len(network.routes) - 1)
    live.solve(ptr, res, w)
    left = rng.random(n) * 1e6
    done_below = np.where(rng.random(n) < 0.2, 2e6, 1e-6)
    assert live.earliest_end_of(left, active, routes, starts, counts) == live.earliest_end(left, active, routes)
    want_left, want_active = left.copy(), active.copy()
    want_counts = move_flows(want_left, live.flow_rates(routes, active), want_active, done_below, starts, 3.0)
    got_counts = counts.copy()
    live.move(left, active, done_below, starts, routes, got_counts, 3.0)
    assert np.array_equal(got_counts, want_counts) and np.array_equal(active, want_active)
    assert np.array_equal(left, want_left)


class UnlistedFlatFlowEngine(FlatFlowEngine):
    listed = False  # the sweeps over every flow of a slot with a flow moving, its flag tested


def test_the_estimates_engine_sweeps_the_listed_flows():
    assert FlatFlowEngine(FabricNetwork(fabric()))._slots.listed_sweeps
    assert not UnlistedFlatFlowEngine(FabricNetwork(fabric()))._slots.listed_sweeps


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("seed", [None, 3])
def test_the_listed_sweeps_end_random_collectives_as_the_sweeps_over_every_flow(slots, params, seed):
    _random_collectives_end_as(UnlistedFlatFlowEngine, params, 11 if seed is None else seed, seed)


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("seed", [None, 4])
def test_an_uneven_moe_play_on_the_listed_sweeps_is_the_one_over_every_flow(slots, params, seed):
    trace = _moe(seed=3 if seed is None else seed)
    network = FabricNetwork(fabric(), hash_seed=seed)
    engine, unlisted = FlatFlowEngine(network, params), UnlistedFlatFlowEngine(network, params)
    got, want = play_on_fabric(trace, engine), play_on_fabric(trace, unlisted)
    assert got.spans == want.spans and got.ranks == want.ranks
    assert engine.solves == unlisted.solves
    assert engine._live.components_solved == unlisted._live.components_solved
    assert engine._live.flows_filled == unlisted._live.flows_filled


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_listed_sweeps_are_the_sweeps_over_every_flow_move_by_move(seed):
    """LiveRates.earliest_end_listed and move_listed, over slots some idle and some with flows ended, move after
    move until every flow has ended: the same minimum, the same bytes left, flags, counts and changed ops as
    earliest_end_of and move, the lists keeping each slot's moving flows ascending, and the same routes' counts
    (a solve after each move gives the same rates)."""
    rng, network, engine, routes, starts, active, counts = _random_slots(seed, 400, 50, 0.7, 0.2)
    n = len(routes)
    listed = np.zeros(n, dtype=np.int64)
    for a, b, c in zip(starts.tolist(), starts[1:].tolist() + [n], counts.tolist()):
        listed[a:a + c] = a + np.flatnonzero(active[a:b])
    ptr, res, w = engine._route_table(len(network.routes) - 1)
    lives = []
    for _ in range(2):
        live = LiveRates(engine.capacity, 0.1)
        live.count_flows(routes, active, 0, n, 1, len(network.routes))
        live.solve(ptr, res, w)
        lives.append(live)
    got_live, want_live = lives
    left = rng.random(n) * 1e6
    done_below = np.full(n, 1e-6)
    got = [left.copy(), active.copy(), counts.copy()]
    want = [left.copy(), active.copy(), counts.copy()]
    moves = 0
    while want[2].any():
        end = want_live.earliest_end_of(want[0], want[1], routes, starts, want[2])
        assert got_live.earliest_end_listed(got[0], routes, starts, got[2], listed) == end
        dt = end * (1.0 if moves % 3 else rng.random())  # some moves end flows, some not
        changed = got_live.move_listed(got[0], got[1], done_below, starts, routes, got[2], listed, dt)
        assert changed == want_live.move(want[0], want[1], done_below, starts, routes, want[2], dt)
        for g, x in zip(got, want):
            assert np.array_equal(g, x)
        for a, b, c in zip(starts.tolist(), starts[1:].tolist() + [n], got[2].tolist()):
            assert np.array_equal(listed[a:a + c], a + np.flatnonzero(got[1][a:b]))
        got_live.solve(ptr, res, w)
        want_live.solve(ptr, res, w)
        assert np.array_equal(got_live.flow_rates(routes, got[1]), want_live.flow_rates(routes, want[1]))
        moves += 1
    assert moves > 20
