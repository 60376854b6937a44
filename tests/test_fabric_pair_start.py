"""A big ring's connections start pair by pair (astra_adapter.fabric.chains.PairStarts): from the clear-to-send size
per connection on, the replay's sender waits for its receiver's token, sent when the receiver enters the op
(genie.engine.program.clear_to_send) - not for the op's last member. And a ring's chunks that fit their window
cross a link they share in FIFO order (chains.RingOp.fifo_waits), not ending together at max-min shares. Both
ring engines, the same floats."""

from __future__ import annotations

import pytest

from astra_adapter.fabric.chain_flows import ChainFlowEngine
from astra_adapter.fabric.flows import WIRE_BYTES_PER_PAYLOAD_BYTE, FabricParams, FlowEngine
from astra_adapter.fabric.player import play_on_fabric
from genie.core.collective import Algorithm
from genie.core.tcp_window import RENDEZVOUS_MIN_BYTES
from genie.core.trace import CommType, ProcessGroup, collective_node, compute_node, make_trace
from tests.fabric_cases import dumbbell

CHAINS = FabricParams(standing_queues=True, ring_chains=True)
PAIRS = FabricParams(ring_chains=True)  # no standing queues: no FIFO order either (the pair starts alone)
SHARED_BYTES_PER_NS = 500e6 / 8 / 1e9  # sw0 <-> sw1, each way
RING = (0, 2, 1, 3)  # 0 -> 2 and 1 -> 3 share sw0 -> sw1, 2 -> 1 and 3 -> 0 share sw1 -> sw0 (a DDP ring spread)
ENTER_NS = {0: 0, 2: 20_000_000, 1: 40_000_000, 3: 60_000_000}  # each rank's entry: 20 ms apart


class _LastEntry(FlowEngine):
    """The rule before: every op starts at its last member's entry."""

    def pair_starts(self, steps):
        return None


class _MaxMin(FlowEngine):
    """The rule before: a ring's chunks on a shared link at their max-min shares, in no order."""

    def _new_ring(self, steps, held):
        ring = super()._new_ring(steps, held)
        ring.fifo = None
        return ring


def _ring_spans(engine, size_bytes: int, enter_ns: dict[int, int] = ENTER_NS) -> dict[int, tuple[float, float]]:
    """A ring all-reduce of ``size_bytes`` over the dumbbell's four hosts in the order RING, rank r entering at
    ``enter_ns[r]`` (after a compute of that long): per rank its (entry, leave) of the op."""
    group = ProcessGroup("dp", RING)
    trace = make_trace([[compute_node(0, "before", duration_ns=enter_ns[r]),
                         collective_node(1, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=size_bytes,
                                         process_group="dp", algorithm=Algorithm.RING, data_deps=(0,))]
                        for r in range(4)], groups=(group,))
    spans = play_on_fabric(trace, engine).spans
    return {r: next((s, e) for i, s, e in spans[r] if i == 1) for r in range(4)}


@pytest.mark.parametrize("engine_class", [FlowEngine, ChainFlowEngine])
def test_a_big_ring_s_connections_start_when_their_own_pair_is_in(engine_class) -> None:
    size_bytes = 8 * RENDEZVOUS_MIN_BYTES  # four 2 MiB blocks: six 2 MiB chunks per connection
    got = _ring_spans(engine_class(dumbbell(), PAIRS), size_bytes)
    old = _ring_spans(_LastEntry(dumbbell(), PAIRS), size_bytes)
    chunk_ns = 2 * RENDEZVOUS_MIN_BYTES * WIRE_BYTES_PER_PAYLOAD_BYTE / SHARED_BYTES_PER_NS  # one chunk alone
    assert all(got[r][0] == ENTER_NS[r] == old[r][0] for r in RING)  # each rank's span starts at its own entry
    # the rule before: the whole ring starts at 60 ms, its two connections on each way share it from there, chunk
    # for chunk (six chunks at half the rate): every rank leaves at the same instant
    assert len({e for _, e in old.values()}) == 1
    assert old[0][1] == pytest.approx(ENTER_NS[3] + 12 * chunk_ns, rel=1e-6)
    # pair by pair: 0 -> 2 runs from 20 ms (alone: its chunk 0 through at 55 ms), 2 -> 1 from 40, 1 -> 3 and
    # 3 -> 0 from 60; the two connections of each way stay apart to the end (1 -> 3 ends 20 ms before 0 -> 2, 3 -> 0
    # 10 ms after 2 -> 1): the ranks they feed leave apart, 3 first, 0 last, and all before the rule before's end
    leave = {r: e for r, (_, e) in got.items()}
    assert leave[3] < leave[1] == leave[2] < leave[0] < old[0][1]
    assert leave[1] - leave[3] == pytest.approx(20e6, rel=0.05)  # 1 -> 3 behind 0 -> 2 on sw0 -> sw1
    assert leave[0] - leave[2] == pytest.approx(10e6, rel=0.05)  # 3 -> 0 behind 2 -> 1 on sw1 -> sw0


@pytest.mark.parametrize("engine_class", [FlowEngine, ChainFlowEngine])
def test_a_ring_whose_ranks_enter_together_or_a_small_ring_starts_at_its_last_entry(engine_class) -> None:
    together = dict.fromkeys(RING, 30_000_000)
    big = 8 * RENDEZVOUS_MIN_BYTES
    assert _ring_spans(engine_class(dumbbell(), PAIRS), big, together) == \
        _ring_spans(_LastEntry(dumbbell(), PAIRS), big, together)
    small = RENDEZVOUS_MIN_BYTES  # 2 x 3/4 x 1 MiB = 1.5 MiB per connection: still a rendezvous
    assert _ring_spans(engine_class(dumbbell(), PAIRS), small) != _ring_spans(_LastEntry(dumbbell(), PAIRS), small)
    eager = RENDEZVOUS_MIN_BYTES // 2  # 0.75 MiB per connection: under the clear-to-send size, the old rule
    assert _ring_spans(engine_class(dumbbell(), PAIRS), eager) == _ring_spans(_LastEntry(dumbbell(), PAIRS), eager)


@pytest.mark.parametrize("engine_class", [FlowEngine, ChainFlowEngine])
def test_a_ring_s_chunks_that_fit_their_window_cross_a_shared_link_in_fifo_order(engine_class) -> None:
    together = dict.fromkeys(RING, 0)
    chunk_ns = RENDEZVOUS_MIN_BYTES * WIRE_BYTES_PER_PAYLOAD_BYTE / SHARED_BYTES_PER_NS  # 1 MiB alone: 16.8 ms
    # a 4 MiB ring: 1 MiB chunks, within a 3 MiB window. Max-min ends the two chunks on each way together, after
    # two chunks' time, and every rank leaves at 12 chunks' time; a FIFO serves them in turn (the tie at 0 by
    # connection index: 0 -> 2 before 1 -> 3, 2 -> 1 before 3 -> 0), one chunk apart: the ranks fed first (2, 1)
    # send on first, and ranks 1 and 3 leave a chunk's time before 0 and 2, which end at the same 12 chunks
    fifo = _ring_spans(engine_class(dumbbell(), CHAINS), 4 * RENDEZVOUS_MIN_BYTES, together)
    maxmin = _ring_spans(_MaxMin(dumbbell(), CHAINS), 4 * RENDEZVOUS_MIN_BYTES, together)
    assert {e for _, e in maxmin.values()} == {maxmin[0][1]}
    assert maxmin[0][1] == pytest.approx(12 * chunk_ns, rel=1e-6)
    assert fifo[0][1] == fifo[2][1] == pytest.approx(12 * chunk_ns, rel=1e-6)
    assert fifo[1][1] == fifo[3][1] == pytest.approx(11 * chunk_ns, rel=1e-6)
    # chunks beyond the window (4 MiB of a 16 MiB ring) keep max-min: TCP keeps a window in the queue, not the chunk
    big = 16 * RENDEZVOUS_MIN_BYTES
    assert _ring_spans(engine_class(dumbbell(), CHAINS), big, together) == \
        _ring_spans(_MaxMin(dumbbell(), CHAINS), big, together)


def _fed_early_ring(op_class):
    """A 4-connection ring op (three 1 MB chunks each, windows of 3 MiB) whose connections 1 and 3 share one link
    (its rate 0.0625 bytes/ns: 16 ms a chunk), both on chunk 1 with 0.5 MB of it left, connection 1's chunk 2
    fed early (its data in) before connection 3's."""
    import numpy as np
    from types import SimpleNamespace
    step = SimpleNamespace(src=np.array([0, 2, 1, 3]), dst=np.array([2, 1, 3, 0]), routes=np.arange(4),
                           wire_bytes=np.full(4, 1e6), latency_ns=0.0)
    op = op_class((step, step, step))
    op.fifo = ((), ((SHARED_BYTES_PER_NS, (3,)),), (), ((SHARED_BYTES_PER_NS, (1,)),))
    windows = np.full(4, 3.0 * 2**20)
    if hasattr(type(op), "windows"):  # (the rule before kept no windows: it read only ``fits``)
        op.windows = windows
    op.fits = op.sizes <= windows
    op.chunk[:] = 1
    op.ready[:] = True
    op.left[:] = 5e5
    op._refresh()
    none = np.zeros(4, dtype=bool)
    op.queue_next(np.array([False, True, False, False]), np.zeros(4))  # connection 1's chunk 2 is in the queue
    op.queue_next(np.array([False, False, False, True]), np.zeros(4))  # then connection 3's, behind it
    return op, none


@pytest.mark.parametrize("compiled", [False, True])
def test_a_chunk_fed_early_waits_the_chunks_fed_before_it_on_a_shared_link(compiled) -> None:
    # both ring engines' ops: the rule is RingOp.fifo_waits, the wait read by each engine's begin
    import numpy as np
    from astra_adapter.fabric.chain_flows import CompiledRingOp
    from astra_adapter.fabric.chains import RingOp
    op, _ = _fed_early_ring(CompiledRingOp if compiled else RingOp)
    # connection 3's chunk 1 goes through first: its chunk 2 (fed second) waits the rest of connection 1's chunk 1
    # and connection 1's chunk 2, fed before it - 1.5 MB at the link's rate, 24 ms - not max-min from now (the
    # rule before: a chunk fed early took no FIFO wait, the two connections' chunks 2 ended together)
    op.chunk[3], op.ready[3], op.left[3] = 2, False, 0.0
    three = np.array([False, False, False, True])
    op.begin(three, np.zeros(4))
    assert op.wait[3] == pytest.approx(1.5e6 / SHARED_BYTES_PER_NS)
    assert not op.active[3]
    # connection 1's chunk 2, fed first, waits nothing when its chunk 1 is through: connection 3's is behind it
    op.chunk[1], op.ready[1], op.left[1] = 2, False, 0.0
    op.begin(np.array([False, True, False, False]), np.zeros(4))
    assert op.wait[1] == 0.0 and op.active[1]
