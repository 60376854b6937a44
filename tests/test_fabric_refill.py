"""A ring connection's standing queue after its step's gap (astra_adapter.fabric.chains.RingOp.standing_bytes):
it refills at what its sender's own link puts on the wire beyond what its bottleneck takes, from what the
connection still had queued, not to a whole window at once."""

from __future__ import annotations

import numpy as np
import pytest

from astra_adapter.fabric.chain_flows import ChainFlowEngine
from astra_adapter.fabric.chains import RingOp
from astra_adapter.fabric.flows import WIRE_BYTES_PER_PAYLOAD_BYTE, FabricParams, FlowEngine
from astra_adapter.measurements import CommOp
from genie.core.collective import Algorithm, Collective
from genie.core.tcp_window import window_bytes
from tests.fabric_cases import advance_to, dumbbell

HOST_BYTES_PER_NS = 1e9 / 8 / 1e9
FABRIC_BYTES_PER_NS = 500e6 / 8 / 1e9
REFILL_BYTES_PER_NS = HOST_BYTES_PER_NS - FABRIC_BYTES_PER_NS  # what a 1 Gbit/s sender adds to a 500 Mbit/s queue
PAIR_RING = CommOp(Collective.ALL_REDUCE, Algorithm.RING, 2, 40_000_000)  # two 20 MB chunks per connection


def _probe_ns(engine: FlowEngine, pair: tuple[int, int] = (1, 3)) -> float:
    """A 512 B message on ``pair`` started now: how long it takes (its wait behind the queues on its path and its
    few microseconds of bytes)."""
    probe = engine.start(engine.plan(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 512), pair))
    t = 0.0
    while engine.busy_ranks(probe) != set():
        for op in [o for o in engine.ops if o.done and o is not probe]:
            engine.remove(op)
        dt = engine.horizon_ns()
        engine.advance(dt)
        t += dt
    return t


def _ring(engine_class, *, head_start_bytes: int = 0) -> tuple[FlowEngine, RingOp]:
    """The 2-rank ring 0 <-> 2 across the fabric link; with ``head_start_bytes``, a send 1 -> 3 of that size beside
    it from the start, which holds 0 -> 2 back on sw0 -> sw1 (2 -> 0 runs alone on sw1 -> sw0)."""
    engine = engine_class(dumbbell(), FabricParams(standing_queues=True, ring_chains=True))
    ring = engine.start(engine.plan(PAIR_RING, (0, 2)))
    assert isinstance(ring, RingOp)
    if head_start_bytes:
        engine.start(engine.plan(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, head_start_bytes), (1, 3)))
    return engine, ring


@pytest.mark.parametrize("engine_class", [FlowEngine, ChainFlowEngine])
def test_a_ring_s_queue_refills_at_its_sender_s_rate_after_the_step_s_gap(engine_class) -> None:
    # each step's queue on sw0 -> sw1 drains with the step's last bytes (0 -> 2's next chunk's data is 2 -> 0's
    # chunk, in at the same moment); the next chunk leaves h0 at 1 Gbit/s and the fabric link takes 500 Mbit/s,
    # so the queue is back to a window (3 MiB) 50 ms into the step, not at once. Measured (benchmarks/README.md,
    # "The spread TP2xDP2 job at the DDP ring's step boundaries"): TP ops starting 0-20 ms after a DDP ring step
    # boundary took 41 ms on the testbed (mean), 28 ms just before it 16 ms; the window at once charged them 60.
    step_ns = 20_000_000 * WIRE_BYTES_PER_PAYLOAD_BYTE / FABRIC_BYTES_PER_NS  # one chunk at 500 Mbit/s
    queue_ns = window_bytes() / FABRIC_BYTES_PER_NS
    # (each probe's own 512 B take ~17 us at its share of the link: abs 50 us)
    engine, _ = _ring(engine_class)
    advance_to(engine, 10e6)  # the first step starts from empty too: 10 ms of refilling
    assert _probe_ns(engine) == pytest.approx(10e6 * REFILL_BYTES_PER_NS / FABRIC_BYTES_PER_NS, abs=5e4)
    engine, _ = _ring(engine_class)
    advance_to(engine, 200e6)
    assert _probe_ns(engine) == pytest.approx(queue_ns, abs=5e4)
    engine, _ = _ring(engine_class)
    advance_to(engine, step_ns - 20e6)  # the step's last 20 ms of bytes (the drain, as before)
    assert _probe_ns(engine) == pytest.approx(20e6, abs=5e4)
    engine, _ = _ring(engine_class)
    advance_to(engine, step_ns + 5e6)  # 5 ms into the next step: what 5 ms of refilling put there
    after = _probe_ns(engine)
    assert after == pytest.approx(5e6 * REFILL_BYTES_PER_NS / FABRIC_BYTES_PER_NS, abs=5e4)
    assert after < 0.2 * queue_ns


@pytest.mark.parametrize("engine_class", [FlowEngine, ChainFlowEngine])
def test_the_refill_runs_at_the_sender_s_rate_not_its_link_s_after_idle_burst(engine_class) -> None:
    # with HTB's after-idle credit (a mix's plays, astra_adapter.fabric.mix) h0's link is in its burst when the
    # ring starts (idle before: the device's 10 Gbit/s for its 131 KB ceil bucket); the queue on sw0 -> sw1 still
    # refills at h0's 1 Gbit/s less the link's share - 10 ms in, ~10 ms of queue, not a whole window
    # (benchmarks/README.md "A 2-rank all-reduce at the DDP ring's step boundaries")
    engine = engine_class(dumbbell(), FabricParams(standing_queues=True, ring_chains=True, htb_credit=True))
    assert engine.credit is not None
    ring = engine.start(engine.plan(PAIR_RING, (0, 2)))
    assert isinstance(ring, RingOp) and ring.inject is not None
    assert ring.inject == pytest.approx(HOST_BYTES_PER_NS)
    advance_to(engine, 10e6)
    waited = _probe_ns(engine)
    assert waited == pytest.approx(10e6 * REFILL_BYTES_PER_NS / FABRIC_BYTES_PER_NS, rel=0.1)
    assert waited < 0.3 * window_bytes() / FABRIC_BYTES_PER_NS


@pytest.mark.parametrize("engine_class", [FlowEngine, ChainFlowEngine])
def test_a_connection_fed_just_before_its_chunk_ends_refills_from_what_it_had_left(engine_class) -> None:
    # a 1 MB send 1 -> 3 beside 0 -> 2 at the start holds 0 -> 2 ~17 ms behind 2 -> 0, so 0 -> 2's next chunk's
    # data (2 -> 0's first chunk) comes in while 0 -> 2 still has ~1 MB of its own to send: its queue then holds
    # that ~1 MB, and h0 adds the next chunk at 1 Gbit/s - 5 ms later the queue is what was left plus 5 ms of
    # refilling, not a whole window (which a connection fed long before its chunk ends does keep)
    engine, ring = _ring(engine_class, head_start_bytes=1_000_000)
    back = int(np.flatnonzero(ring.steps[0].src == 2)[0])
    out = int(np.flatnonzero(ring.steps[0].src == 0)[0])
    t = 0.0
    while int(ring.chunk[back]) < 1:  # to the moment 2 -> 0's first chunk is through
        for op in [o for o in engine.ops if o.done and o is not ring]:
            engine.remove(op)  # the 1 MB send, once through
        assert t < 1e9
        dt = engine.horizon_ns()
        engine.advance(dt)
        t += dt
    left = float(ring.left[out])  # 0 -> 2's own chunk's rest then: all of it queued on sw0 -> sw1
    assert 0.5e6 < left < 0.5 * window_bytes() and int(ring.chunk[out]) == 0
    advance_to(engine, 5e6)
    # in those 5 ms the link took 5 ms of it and h0 added 5 ms at its own rate
    expected_ns = (left - 5e6 * FABRIC_BYTES_PER_NS + 5e6 * HOST_BYTES_PER_NS) / FABRIC_BYTES_PER_NS
    waited = _probe_ns(engine)
    assert waited == pytest.approx(expected_ns, rel=0.02)
    assert waited < 0.6 * window_bytes() / FABRIC_BYTES_PER_NS


def test_a_connection_fed_long_before_its_chunk_ends_keeps_its_window() -> None:
    # a 4-rank ring 0 -> 1 -> 2 -> 3 -> 0: 0 -> 1 and 2 -> 3 on 1 Gbit/s host links, 1 -> 2 and 3 -> 0 across the
    # fabric at 500 Mbit/s. Rank 1 has each next chunk long before 1 -> 2 is through with its own: its stream
    # never pauses, so at its chunk boundaries its queue stays a window (no refill from empty)
    engine = FlowEngine(dumbbell(), FabricParams(standing_queues=True, ring_chains=True))
    op = engine.start(engine.plan(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 4, 40_000_000), (0, 1, 2, 3)))
    assert isinstance(op, RingOp)
    slow = int(np.flatnonzero((op.steps[0].src == 1) & (op.steps[0].dst == 2))[0])
    chunk_ns = 10_000_000 * WIRE_BYTES_PER_PAYLOAD_BYTE / FABRIC_BYTES_PER_NS
    t, seen = 0.0, 0
    while t < 2.5 * chunk_ns:
        dt = min(engine.horizon_ns(), 2.5 * chunk_ns - t)
        engine.advance(dt)
        t += dt
        if t > chunk_ns + 1e3 and op.ready[slow]:  # past 1 -> 2's first chunk, moving its second
            assert op.standing_bytes()[slow] >= window_bytes()
            seen += 1
    assert seen and int(op.chunk[slow]) >= 2
