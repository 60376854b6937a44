"""A ring's ranks each on their own step in the fabric model (astra_adapter.fabric.chains): a connection moves its
next chunk as soon as its sender has received the one before, as the replay's ranks do, so on a ring whose
connections move at unequal rates the ranks leave the op one by one instead of together."""

from __future__ import annotations

import numpy as np
import pytest

from astra_adapter.fabric.chains import RingOp, ring_like
from astra_adapter.fabric.chain_flows import ChainFlowEngine
from astra_adapter.fabric.flat_flows import FlatFlowEngine, engine_for
from astra_adapter.fabric.flows import WIRE_BYTES_PER_PAYLOAD_BYTE, FabricParams, FlowEngine
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.measurements import CommOp
from genie.core.collective import Algorithm, Collective
from genie.core.tcp_window import send_buffer_bytes, window_bytes
from tests.fabric_cases import advance_to, dumbbell

HOST_BYTES_PER_NS = 1e9 / 8 / 1e9
FABRIC_BYTES_PER_NS = 500e6 / 8 / 1e9


def _leave_times(engine: FlowEngine, op, until_done: bool = True) -> dict[int, float]:
    """When each member of ``op`` leaves it (the engine's busy ranks), playing the engine until ``op`` is done."""
    members = set(int(r) for s in op.steps for r in (*s.src.tolist(), *s.dst.tolist()))
    left: dict[int, float] = {}
    t = 0.0
    while len(left) < len(members):
        busy = engine.busy_ranks(op)
        if busy is not None:
            for rank in members - busy - left.keys():
                left[rank] = t
        if len(left) == len(members):
            break
        dt = engine.horizon_ns()
        assert dt < float("inf")
        engine.advance(dt)
        t += dt
    return left


ALLREDUCE = CommOp(Collective.ALL_REDUCE, Algorithm.RING, 4, 40_000_000)


def test_a_ring_s_steps_run_the_same_connections_and_other_shapes_do_not() -> None:
    engine = FlowEngine(dumbbell())
    assert ring_like(engine.plan(ALLREDUCE, (0, 1, 2, 3)))
    assert not ring_like(engine.plan(CommOp(Collective.ALL_TO_ALL, Algorithm.DIRECT, 4, 4_000_000), (0, 1, 2, 3)))
    assert not ring_like(engine.plan(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 1000), (0, 1)))


def test_ring_chains_run_on_the_reference_engine_s_chain_form() -> None:
    # ChainFlowEngine is the reference FlowEngine with the work whose answer is known skipped
    # (tests/test_fabric_chain_engine.py compares the two span for span)
    assert isinstance(engine_for(dumbbell(), FabricParams(ring_chains=True)), ChainFlowEngine)
    assert not isinstance(engine_for(dumbbell(), FabricParams(ring_chains=True)), FlatFlowEngine)
    assert isinstance(engine_for(dumbbell(), FabricParams()), FlatFlowEngine)
    with pytest.raises(ValueError):  # the flat engine has no per-connection state: it would play lock step
        FlatFlowEngine(dumbbell(), FabricParams(ring_chains=True))


def test_a_ring_with_a_slow_connection_ends_rank_by_rank_as_its_chain_of_receives_says() -> None:
    # ring 0 -> 1 -> 2 -> 3 -> 0 on the dumbbell; a long message h1 -> h2 shares the whole path of the ring's
    # 1 -> 2 connection, which so moves at 250 Mbit/s; 0 -> 1 and 2 -> 3 stay on one switch (1 Gbit/s) and
    # 3 -> 0 crosses the fabric alone (500 Mbit/s). No connection of the ring shares a link with another.
    engine = FlowEngine(dumbbell(), FabricParams(ring_chains=True))
    engine.start(engine.plan(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 10**10), (1, 2)))
    steps = engine.plan(ALLREDUCE, (0, 1, 2, 3))
    ring = engine.start(steps)
    assert isinstance(ring, RingOp)
    chunk = ALLREDUCE.size_bytes / 4 * WIRE_BYTES_PER_PAYLOAD_BYTE
    src = steps[0].src.tolist()
    rate = {0: HOST_BYTES_PER_NS, 1: FABRIC_BYTES_PER_NS / 2, 2: HOST_BYTES_PER_NS, 3: FABRIC_BYTES_PER_NS}
    # connection s -> s + 1 moves chunk k once it moved chunk k - 1 and the connection into s delivered k - 1
    done = {s: 0.0 for s in range(4)}
    for _ in range(len(steps)):
        began = {s: max(done[s], done[(s - 1) % 4]) for s in range(4)}
        done = {s: began[s] + chunk / rate[s] for s in range(4)}
    # a rank leaves with its receive in and its last send written: all but the socket's send buffer of it sent
    socket = send_buffer_bytes(1_000_000_000, 0) * WIRE_BYTES_PER_PAYLOAD_BYTE
    written = {s: began[s] + max(chunk - socket, 0.0) / rate[s] for s in range(4)}
    expected = {r: max(done[(r - 1) % 4], written[r]) for r in range(4)}
    got = _leave_times(engine, ring)
    assert sorted(src) == [0, 1, 2, 3] and len(steps) == 6
    assert got == pytest.approx(expected, rel=1e-9)
    # the ranks leave over more than a chunk's time at the slow rate (rank 1, sending into it, once all but its
    # socket's buffer is sent); in lock step all 6 steps take the slow connection's time and every rank leaves
    # within the last one
    assert max(got.values()) - min(got.values()) > chunk / rate[1]
    assert got[1] < max(got.values()) - 0.9 * socket / rate[1]
    lock = FlowEngine(dumbbell(), FabricParams())
    lock.start(lock.plan(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 10**10), (1, 2)))
    locked = _leave_times(lock, lock.start(lock.plan(ALLREDUCE, (0, 1, 2, 3))))
    assert min(locked.values()) >= 5 * chunk / rate[1]
    assert max(got.values()) == pytest.approx(max(locked.values()), rel=1e-9)  # the slow chain sets the end


def test_an_even_ring_alone_is_the_same_in_chains_as_in_lock_step() -> None:
    for params in (FabricParams(), FabricParams(ring_chains=True)):
        engine = FlowEngine(dumbbell(), params)
        got = _leave_times(engine, engine.start(engine.plan(ALLREDUCE, (0, 1, 2, 3))))
        # 0 -> 1 and 2 -> 3 at 1 Gbit/s, 1 -> 2 and 3 -> 0 across the fabric at 500 Mbit/s: the slow ones lead
        assert max(got.values()) == pytest.approx(6 * ALLREDUCE.size_bytes / 4 * WIRE_BYTES_PER_PAYLOAD_BYTE
                                                  / FABRIC_BYTES_PER_NS, rel=1e-9), params


def test_a_pair_s_all_reduce_behind_a_queue_one_way_waits_it_once() -> None:
    # measured: a TP pair's 512 B all-reduce took ~100 ms with one direction behind a 6 MiB queue (100 ms): the
    # second step's chunk queues right behind the first on the slow connection, it does not wait the queue again
    def allreduce_ns(longs: list[tuple[int, int]]) -> float:
        return max(allreduce_leaves(longs).values())

    def allreduce_leaves(longs: list[tuple[int, int]]) -> dict[int, float]:
        engine = FlowEngine(dumbbell(), FabricParams(standing_queues=True, ring_chains=True))
        for pair in longs:
            engine.start(engine.plan(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 10**9), pair))
        advance_to(engine, 200e6)  # the long flows' windows queue on the fabric link
        op = engine.start(engine.plan(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 2, 512), (1, 3)))
        return _leave_times(engine, op)

    queue_ns = window_bytes() / FABRIC_BYTES_PER_NS  # one long flow's window at 500 Mbit/s: 50.3 ms
    one_way = allreduce_ns([(0, 2)])
    assert one_way == pytest.approx(queue_ns, rel=1e-3)  # not twice: once per step
    both = allreduce_ns([(0, 2), (2, 0)])
    assert both == pytest.approx(2 * queue_ns, rel=1e-3)  # each direction's queue once, one after the other
    assert np.isfinite(one_way) and np.isfinite(both)


def test_a_chunk_behind_a_queue_passes_it_as_a_fifo_does_not_queue_then_share() -> None:
    # measured (benchmarks/README.md "Job mixes", the bucket0 section): the spread TP job's 196 KB all-reduces
    # behind DDP's two-flow queues took ~0-9 ms more than its 512 B ones; waiting the queue and then moving at a
    # third of the link gave ~10 ms more. A FIFO passes a chunk of b bytes behind Q in (Q + b) / rate.
    from astra_adapter.fabric.queues import fifo_wait_ns

    one = np.ones(1)
    assert fifo_wait_ns(one, np.array([6e6]), np.array([0.0625]), np.array([2.0]), 1e5) == pytest.approx(5.8e6 / 0.0625)
    assert fifo_wait_ns(one, np.array([1e5]), np.array([0.0625]), np.array([2.0]), 1e5) == 0.0  # not below 0

    def leaves(size: int, engine_type=FlowEngine) -> dict[int, float]:
        engine = engine_type(dumbbell(), FabricParams(standing_queues=True, ring_chains=True))
        for pair in [(0, 2), (0, 2)]:  # two long flows keep 2 windows queued on sw0 -> sw1
            engine.start(engine.plan(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 10**9), pair))
        advance_to(engine, 200e6)
        return _leave_times(engine, engine.start(engine.plan(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 2, size),
                                                              (1, 3))))

    # a long chunk counts only the burst its sender's own link lets out at once (TCP small queues): the rest comes
    # ACK-clocked, at its share
    from astra_adapter.fabric.queues import ring_chunk_bytes
    from genie.core.tcp_window import sender_queue_bytes

    engine = FlowEngine(dumbbell(), FabricParams(standing_queues=True, ring_chains=True))
    ring = engine.start(engine.plan(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 2, 10**8), (1, 3)))
    assert ring_chunk_bytes(engine.queues, ring).tolist() == [float(sender_queue_bytes(10**9))] * 2

    queue_ns = 2 * window_bytes() / FABRIC_BYTES_PER_NS  # 100.7 ms
    chunk_ns = 98_304 * WIRE_BYTES_PER_PAYLOAD_BYTE / FABRIC_BYTES_PER_NS  # one 98 KB chunk at the link's rate
    for engine_type in (FlowEngine, ChainFlowEngine):
        assert max(leaves(512, engine_type).values()) == pytest.approx(queue_ns, rel=1e-3)  # the wait alone
        big = leaves(196_608, engine_type)
        # each chunk on 1 -> 3 waits (Q - 2 b) / rate, then moves at a third of the link (3 b): rank 1 leaves at
        # Q + 2 b, rank 3 at Q + 4 b (the second chunk, queued behind the first, moves once that one is through);
        # a wait of Q / rate and then the share gave Q + 4 b and Q + 6 b
        assert big[1] == pytest.approx(queue_ns + 2 * chunk_ns, rel=1e-4)
        assert big[3] == pytest.approx(queue_ns + 4 * chunk_ns, rel=1e-4)


def test_a_chunk_joins_the_queue_when_its_data_comes_in_not_when_its_connection_is_free() -> None:
    # a TP pair 1 <-> 3 with 1 -> 3 behind one long flow's window (50 ms) and 3 -> 1 behind two (100 ms): the second
    # step's chunk 3 -> 1 has its data at 50 ms (1 -> 3's first chunk in) and waits the 100 ms queue from then;
    # 1 -> 3's second chunk has its data at 100 ms and waits 50 ms from then: both ranks are done at 150 ms (the
    # replay: a pair behind queues both ways waits both, one after the other)
    engine = FlowEngine(dumbbell(), FabricParams(standing_queues=True, ring_chains=True))
    for pair in ((0, 2), (2, 0), (2, 1)):
        engine.start(engine.plan(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 10**9), pair))
    advance_to(engine, 300e6)
    left = _leave_times(engine, engine.start(engine.plan(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 2, 512),
                                                         (1, 3))))
    queue_ns = window_bytes() / FABRIC_BYTES_PER_NS
    assert left[1] == pytest.approx(3 * queue_ns, rel=1e-3) and left[3] == pytest.approx(3 * queue_ns, rel=1e-3)


class _CheckedEngine(FlowEngine):
    """The reference engine that, at every event, checks each ring's kept answers (bytes still to send, busy
    ranks) against the same rule worked out afresh from the ring's state."""

    checked = 0

    def horizon_ns(self) -> float:
        for op in self.ops:
            if isinstance(op, RingOp):
                on = op.chunk < op.count
                fresh = np.zeros(len(op.chunk))
                for c in np.flatnonzero(on).tolist():  # the chunk's rest, then each later chunk its sender has
                    k = int(op.chunk[c])
                    fresh[c] = op.left[c] if op.ready[c] else op.sizes[k, c]
                    upstream = op.count if op.pred[c] < 0 else int(op.chunk[op.pred[c]])  # chunks delivered into it
                    for j in range(k + 1, op.count):
                        if upstream >= j:
                            fresh[c] += op.sizes[j, c]
                assert np.allclose(op.remaining_bytes(), fresh, rtol=1e-12, atol=1e-6)
                written = (op.chunk == op.count - 1) & op.ready & (op.left <= op.send_buffer)
                first = op.steps[0]
                assert op.busy_ranks() == set(first.dst[on].tolist()) | set(first.src[on & ~written].tolist())
                assert op.done == bool(np.all(op.chunk >= op.count))
                self.checked += 1
        return super().horizon_ns()


@pytest.mark.parametrize("seed", [0, 1])
def test_a_ring_s_kept_answers_are_its_state_s_at_every_event_of_a_random_mix(seed) -> None:
    # a ring keeps its bytes still to send and its busy ranks between changes of its state (the what-if's queue
    # reads ask for them once per chunk started): in random job mixes with queues and chains, every answer it
    # gives is the one its state gives then
    from genie.core.topology import LinkShape
    from genie.topology.builders import leaf_spine
    from genie.workloads.generators.options import GeneratorOptions, generate_from_options
    from genie.workloads.mix import merge_jobs
    from astra_adapter.fabric.player import play_on_fabric

    topology = leaf_spine(4, 4, 2, shape=LinkShape(rate_bps=1_000_000_000),
                          fabric_shape=LinkShape(rate_bps=500_000_000))
    base = {"model": "gpt3-125m", "layers": 1, "seq": 128, "batch": 1}
    jobs = [{**base, "dp": 4}, {**base, "tp": 2, "dp": 2},
            {**base, "dp": 4, "ep": 4, "experts": 4, "top_k": 2, "moe_every": 1}]
    traces = [generate_from_options(GeneratorOptions.parse(options)) for options in jobs]
    rng = np.random.default_rng(seed)
    hosts, slots = rng.permutation(16).tolist(), []
    for trace in traces:
        slots.append(tuple(hosts[:trace.num_ranks]))
        hosts = hosts[trace.num_ranks:]
    merged, _ = merge_jobs(traces, [f"job{j}" for j in range(len(traces))], slots, [2] * len(traces),
                           [int(rng.integers(0, 3)) * 1_000_000 for _ in traces], world=16)
    engine = _CheckedEngine(FabricNetwork(topology, hash_seed=seed),
                            FabricParams(standing_queues=True, ring_chains=True))
    play_on_fabric(merged, engine)
    assert engine.checked > 100  # rings were in flight at many events


def test_a_ring_queues_only_the_chunks_its_sender_has_the_data_for() -> None:
    # a 2-rank ring all-reduce 0 <-> 2 across the dumbbell's fabric link; a while in, a 512 B message 1 -> 3 meets
    # the queue 0 -> 2 keeps on sw0 -> sw1. Rank 0 has only its first chunk's data (its second comes with 2 -> 0's
    # first chunk), so that queue is the first chunk's rest: a sender writes only the data it holds. With chunks
    # larger than a window the queue is the window, as before.
    # (the probe comes once the ring's queue has refilled from empty at h0's 1 Gbit/s: 10 ms in for the small
    # chunks, whose rest is then below what 0 -> 2 has put on the fabric link's queue, 100 ms for the large ones)
    def probe_ns(size_bytes: int, at_ns: float) -> tuple[float, float]:
        engine = FlowEngine(dumbbell(), FabricParams(standing_queues=True, ring_chains=True))
        ring = engine.start(engine.plan(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 2, size_bytes), (0, 2)))
        assert isinstance(ring, RingOp) and ring.count == 2
        advance_to(engine, at_ns)
        chunk_left = size_bytes / 2 * WIRE_BYTES_PER_PAYLOAD_BYTE - at_ns * FABRIC_BYTES_PER_NS
        probe = engine.start(engine.plan(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 512), (1, 3)))
        t = 0.0
        while engine.busy_ranks(probe) != set():  # to the probe's end (None: all its ranks still in it); a
            # done ring leaves the engine, as in a play
            for op in [o for o in engine.ops if o.done and o is not probe]:
                engine.remove(op)
            dt = engine.horizon_ns()
            engine.advance(dt)
            t += dt
        return t, chunk_left

    queue_ns = window_bytes() / FABRIC_BYTES_PER_NS
    small, chunk_left = probe_ns(2_000_000, 10e6)  # chunks of ~1 MB: less than a window (3 MiB)
    assert chunk_left < window_bytes()
    # the wait behind the chunk's rest, then the message itself (512 B, a few microseconds at its share)
    assert small == pytest.approx(chunk_left / FABRIC_BYTES_PER_NS, rel=0.01)
    assert small < 0.6 * min(2 * chunk_left, window_bytes()) / FABRIC_BYTES_PER_NS  # not both chunks' bytes
    large, chunk_left = probe_ns(40_000_000, 100e6)  # chunks of ~20 MB: the window stands
    assert chunk_left > window_bytes()
    assert large == pytest.approx(queue_ns, rel=0.01)
