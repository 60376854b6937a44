"""The ring-chain engine (astra_adapter.fabric.chain_flows) gives the reference FlowEngine's results with ring
chains and standing queues on, bit for bit (pure; small cases): random job mixes on random placements of an
oversubscribed leaf-spine, and random sets of concurrent collectives on a 3-tier fabric, each with and without
the compiled solve; each case also checks that the chains changed the play (so the comparison covers them)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from astra_adapter.fabric.chain_flows import ChainFlowEngine, CompiledRingOp
from astra_adapter.fabric.chains import RingOp
from astra_adapter.fabric.flat_flows import engine_for
from astra_adapter.fabric.flows import FabricParams, FlowEngine, run_concurrently
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from astra_adapter.fabric.queues import SATURATED_FRACTION
from fabric_mix_support import MIX_TOPOLOGY, random_mixes

CHAINS = FabricParams(standing_queues=True, ring_chains=True)


class _Numpy(ChainFlowEngine):
    compiled_solve = False  # the numpy solve and RingOp's numpy methods: the skipped work alone
    ring_op = RingOp
    compiled_queues = False


def test_plays_with_ring_chains_run_on_the_chain_engine() -> None:
    network = FabricNetwork(MIX_TOPOLOGY)
    assert type(engine_for(network, CHAINS)) is ChainFlowEngine
    assert type(engine_for(network, replace(CHAINS, standing_queues=False))) is ChainFlowEngine
    assert not isinstance(engine_for(network, FabricParams(standing_queues=True)), ChainFlowEngine)
    try:
        import astra_adapter.fabric.chains_core  # noqa: F401  (built by the install step where it can be)
    except ImportError:
        pytest.skip("astra_adapter.fabric.chains_core is not built")
    assert ChainFlowEngine.ring_op is CompiledRingOp  # built: a ring's per-event work runs compiled


@pytest.mark.parametrize("engine", [ChainFlowEngine, _Numpy])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_job_mixes_with_chains_and_queues_play_as_the_reference(engine, seed):
    # 2-4 jobs at random host slots and start offsets, each repeated twice: rings whose connections run at
    # unequal rates beside other jobs' elephants, chunks starting mid-advance in every order of the engine's ops
    rng = np.random.default_rng(seed)
    chained = skipped = paired = 0
    for merged, contention, overhead_ns, network in random_mixes(rng):
        params = replace(CHAINS, flow_contention=contention, message_overhead_ns=overhead_ns)
        want = play_on_fabric(merged, FlowEngine(network, params))
        fast = engine(network, params)
        got = play_on_fabric(merged, fast)
        assert got.ranks == want.ranks
        assert got.spans == want.spans  # every node's start and end, bit for bit
        chained += want.spans != play_on_fabric(merged, FlowEngine(network, replace(params,
                                                                                   ring_chains=False))).spans
        skipped += fast.queue_reads < fast.queue_asks
        paired += fast.releases
    assert chained  # the chains changed the play: they were exercised
    assert skipped  # some reads were known to be 0.0 and skipped: the short cut was exercised
    assert paired  # some big rings started pair by pair (chains.PairStarts): their releases were exercised


@pytest.mark.parametrize("engine", [ChainFlowEngine, _Numpy])
@pytest.mark.parametrize("params", [CHAINS, replace(CHAINS, flow_contention=0.05),
                                    replace(CHAINS, message_overhead_ns=3000.0, endpoint_delay_ns=20000.0),
                                    replace(CHAINS, standing_queues=False)])
def test_random_concurrent_collectives_with_chains_end_when_the_reference_says(engine, params):
    from tests.test_fabric_flat_engine import _random_ops, small_fabric

    rng = np.random.default_rng(17)
    network = FabricNetwork(small_fabric(), hash_seed=3)
    chained = 0
    for _ in range(8):
        ops = _random_ops(rng, network.world_size)
        want = run_concurrently(FlowEngine(network, params), ops)
        assert run_concurrently(engine(network, params), ops) == want  # bit for bit
        chained += want != run_concurrently(FlowEngine(network, replace(params, ring_chains=False)), ops)
    assert chained


def _ring(engine, members: tuple[int, ...]):
    from astra_adapter.measurements import CommOp
    from genie.core.collective import Algorithm, Collective

    return engine.start(engine.plan(CommOp(Collective.ALL_REDUCE, Algorithm.RING, len(members), 1 << 22), members))


def test_a_queue_read_whose_paths_no_other_moving_flow_crosses_solves_no_rates() -> None:
    # two rings under different leaves share no link: a read for one has no queue whatever the other's rates,
    # answered before the moving set is solved; a ring across the spines crosses the first one's links: solved
    engine = ChainFlowEngine(FabricNetwork(MIX_TOPOLOGY), CHAINS)
    first = _ring(engine, (0, 1, 2, 3))
    while not first.active_count:  # its chunks through their latency: its flows move
        engine.advance(engine.horizon_ns())
    for members, solved in (((4, 5, 6, 7), 0), ((1, 5, 9, 13), 1)):
        op = _ring(engine, members)
        engine._moving_rates.clear()  # the moving set not known: a read that needs its rates solves them
        solves = engine.solves
        read = engine._read_queues(op, op.steps[0], np.ones(len(op.active), dtype=bool))
        assert engine.solves == solves + solved
        if not solved:
            assert read is None


def test_flows_on_kept_per_step_and_flows_with_a_rate_counts_as_fresh() -> None:
    engine = ChainFlowEngine(FabricNetwork(MIX_TOPOLOGY), CHAINS)
    q = engine.queues
    steps = [_ring(engine, members).steps[0] for members in ((0, 1, 2, 3), (1, 5, 9, 13), (2, 6, 10, 14))]
    rng = np.random.default_rng(4)

    def fresh(rated):  # StandingQueues.flows_on as it was: each step's count again, added in order
        n = np.zeros(len(engine.capacity))
        for step, rate in rated:
            res, w, flow, _ = q.entries(step)
            n += np.bincount(res, weights=w * (rate[flow] > 0), minlength=len(engine.capacity))
        return n

    for _ in range(40):  # the same steps with other flows moving: other counts, kept apart
        rated = [(s, rng.random(len(s.routes)) * (rng.random(len(s.routes)) < 0.6)) for s in steps]
        assert q.flows_on(rated).tobytes() == fresh(rated).tobytes()
    assert 0 < len(q._flows_of) <= 3 * 2 ** 4  # kept per step and set of flows with a rate


def _core():
    try:
        from astra_adapter.fabric import chains_core
    except ImportError:
        pytest.skip("astra_adapter.fabric.chains_core is not built")
    return chains_core


def test_the_compiled_sum_is_numpys_to_the_bit() -> None:
    # below 8 terms in order from 0.0, eight running sums up to 128, halves above: values of very different sizes
    # tell the orders apart
    core = _core()
    rng = np.random.default_rng(5)
    for n in list(range(0, 40)) + [127, 128, 129, 255, 256, 257, 300, 1000]:
        for _ in range(20):
            a = rng.random(n) * 10.0 ** rng.integers(-8, 8, n)
            assert core.sum_like_numpy(a) == float(np.sum(a))


def test_compiled_ring_waits_are_fifo_wait_ns_per_connection() -> None:
    # per needed connection with a queue on its path fifo_wait_ns of its row, the others left at 0.0; without
    # flows_on only whether some needed path has a queue
    from astra_adapter.fabric.queues import fifo_wait_ns

    core = _core()
    engine = ChainFlowEngine(FabricNetwork(MIX_TOPOLOGY), CHAINS)
    op = _ring(engine, (1, 5, 9, 13))
    routes = op.steps[0].routes
    ptr, res, w = engine._route_table(int(routes.max()))
    rng = np.random.default_rng(6)
    found = 0
    for _ in range(200):
        queued = rng.random(len(engine.capacity)) * 1e6 * (rng.random(len(engine.capacity)) < 0.05)
        flows_on = rng.integers(0, 4, len(engine.capacity)).astype(float) / 3.0
        chunk = rng.random(len(routes)) * 2e5
        needed = rng.random(len(routes)) < 0.5
        want = np.zeros(len(routes))
        has = False
        for k in np.flatnonzero(needed).tolist():
            r = int(routes[k])
            q = queued[res[ptr[r]:ptr[r + 1]]]
            if q.any():
                has = True
                want[k] = fifo_wait_ns(w[ptr[r]:ptr[r + 1]], q, engine.capacity[res[ptr[r]:ptr[r + 1]]],
                                       flows_on[res[ptr[r]:ptr[r + 1]]], float(chunk[k]))
        assert core.ring_waits(routes, needed.view(np.uint8), ptr, res, w, queued, engine.capacity, None, None,
                               None) == has
        got = np.zeros(len(routes))
        core.ring_waits(routes, needed.view(np.uint8), ptr, res, w, queued, engine.capacity, flows_on, chunk, got)
        assert got.tobytes() == want.tobytes()
        found += has and bool(want.any())
    assert found  # some waits were not 0.0


def test_compiled_flows_on_counts_each_step_then_adds_them_in_order() -> None:
    # weights that are not sums of powers of two: the order of the additions shows
    core = _core()
    rng = np.random.default_rng(7)
    for _ in range(50):
        rated = []
        for _ in range(rng.integers(1, 6)):
            m, flows = int(rng.integers(1, 40)), int(rng.integers(1, 8))
            rated.append((rng.integers(0, 30, m), rng.random(m) / 3.0, rng.integers(0, flows, m),
                          rng.random(flows) * (rng.random(flows) < 0.7)))
        want = np.zeros(30)
        for res, w, flow, rate in rated:
            want += np.bincount(res, weights=w * (rate[flow] > 0), minlength=30)
        got = core.flows_on_of([(core.StepEntries(res, w, flow), rate) for res, w, flow, rate in rated], 30)
        assert got.tobytes() == want.tobytes()


def test_a_moving_sets_routes_kept_per_steps_are_not_taken_for_other_steps() -> None:
    # the routes one after the other kept per moving set's step ids: an entry whose steps are not the ones moving
    # now (a freed step's id reused) is built again, never read
    engine = ChainFlowEngine(FabricNetwork(MIX_TOPOLOGY), CHAINS)
    for members in ((0, 1, 2, 3), (1, 5, 9, 13)):
        _ring(engine, members)
    while not all(op.active_count for op in engine.ops):
        engine.advance(engine.horizon_ns())
    moving, hit = engine._moving()
    key = next(k for k, v in engine._moving_rates.items() if v is hit)
    other = _ring(ChainFlowEngine(FabricNetwork(MIX_TOPOLOGY), CHAINS), (4, 5, 6, 7)).steps[0]
    kept = engine._steps_routes[key[1]]
    engine._steps_routes[key[1]] = ([other] * len(moving), np.zeros_like(kept[1]), kept[2])
    got = engine._solve_moving(moving, key)
    assert [g.tobytes() for g in got] == [h.tobytes() for h in hit[0]]
    assert engine._steps_routes[key[1]][0] == [op.steps[op.step] for op in moving]


def test_the_compiled_load_says_saturated_as_standing_queues_do() -> None:
    # moving_load's flags: StandingQueues.saturated of its load, resource for resource (loads at the threshold)
    core = _core()
    engine = ChainFlowEngine(FabricNetwork(MIX_TOPOLOGY), replace(CHAINS, flow_contention=0.05))
    q = engine.queues
    steps = [_ring(engine, members).steps[0] for members in ((0, 1, 2, 3), (1, 5, 9, 13), (2, 6, 10, 14))]
    rng = np.random.default_rng(8)
    saturated = 0
    for _ in range(40):
        rated = [(s, engine.capacity[0] * rng.choice([0.0, 0.25, 0.5, 1.0], len(s.routes))) for s in steps]
        full = np.empty(len(engine.capacity), dtype=bool)
        load = core.moving_load([(engine._entries_of(s), rate) for s, rate in rated], len(engine.capacity),
                                q.flow_contention, engine.capacity, q.limit, SATURATED_FRACTION, full.view(np.uint8))
        want = q.load(rated)
        assert load.tobytes() == want.tobytes()
        assert full.tobytes() == q.saturated(want).tobytes()
        saturated += int(full.sum())
    assert saturated  # some resources were full


def test_a_compiled_rings_busy_ranks_and_standing_bytes_are_ringops() -> None:
    # event by event through two rings that share the spines: RingOp's numpy methods on the same state
    _core()
    engine = ChainFlowEngine(FabricNetwork(MIX_TOPOLOGY), CHAINS)
    ops = [_ring(engine, members) for members in ((0, 1, 2, 3), (1, 5, 9, 13))]
    assert all(isinstance(op, CompiledRingOp) and op.inject is not None for op in ops)
    events = changed = 0
    while not all(op.done for op in ops) and events < 3000:
        for op in ops:
            op._busy_key = b""  # each answer made afresh
            got = op.busy_ranks()
            op._busy_key = b""
            assert got == RingOp.busy_ranks(op)
            assert op.standing_bytes().tobytes() == RingOp.standing_bytes(op).tobytes()
            changed += bool((op.standing_bytes() < op.remaining_bytes()).any())  # the fill bounds a queue
        engine.advance(engine.horizon_ns())
        events += 1
    assert all(op.done for op in ops) and changed


def test_a_compiled_lock_step_move_is_the_numpy_one() -> None:
    # FlowEngine._advance_lock_step's arrays: left - rate x dt (no fused product), the flags above done_below
    core = _core()
    rng = np.random.default_rng(9)
    for _ in range(200):
        n = int(rng.integers(1, 50))
        left = rng.random(n) * 10.0 ** rng.integers(0, 8, n)
        rate = rng.random(n) * (rng.random(n) < 0.8) / 3.0
        active = rate > 0
        dt, done_below = float(rng.random() * 1e5), float(rng.random() * 100)
        got_left, got_active, count = core.lock_step_move(left, rate, active.view(np.uint8), dt, done_below)
        want_left = left - rate * dt
        want_active = active & (want_left > done_below)
        assert got_left.tobytes() == want_left.tobytes()
        assert got_active.dtype == bool and got_active.tobytes() == want_active.tobytes()
        assert count == int(np.count_nonzero(want_active))
