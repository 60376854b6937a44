"""ASTRA-sim's one communication slot per NPU: where it held a send or collective back, and what the calibrated
estimate and the experiment say about it."""

from __future__ import annotations

import numpy as np

from astra_adapter.calibrate import calibrate, model_ns
from astra_adapter.fabric.estimate import sends_beside_collectives
from astra_adapter.mapping import map_topology
from astra_adapter.measurements import CommOp, Measurement
from astra_adapter.workload_estimate import estimate_calibrated
from genie.core.collective import Algorithm, Collective
from genie.core.topology import LinkShape
from genie.core.trace import CommType, ProcessGroup, collective_node, compute_node, make_trace, recv_node, send_node
from genie.topology import star

GBIT = LinkShape(rate_bps=1_000_000_000)
AR_BYTES, SEND_BYTES = 8 << 20, 1 << 20


def _trace(*, send_first: bool = False, send_after_all_reduce: bool = False):
    """Rank 0 all-reduces with rank 1 and sends to rank 2, both ready at once after a compute node (or the
    send only after the all-reduce)."""
    ar_id, send_id = (2, 1) if send_first else (1, 2)
    send_deps = (ar_id,) if send_after_all_reduce else (0,)
    rank0 = sorted([compute_node(0, "fwd", duration_ns=1000),
                    collective_node(ar_id, "allreduce.dp", comm_type=CommType.ALL_REDUCE, size_bytes=AR_BYTES,
                                    process_group="dp", data_deps=(0,)),
                    send_node(send_id, "send.act", rank=0, peer=2, size_bytes=SEND_BYTES, data_deps=send_deps)],
                   key=lambda n: n.id)
    rank1 = [collective_node(0, "allreduce.dp", comm_type=CommType.ALL_REDUCE, size_bytes=AR_BYTES,
                             process_group="dp")]
    rank2 = [recv_node(0, "recv.act", rank=2, peer=0, size_bytes=SEND_BYTES)]
    return make_trace([rank0, rank1, rank2], groups=(ProcessGroup("dp", (0, 1)),))


def _calibrated(trace):
    mapping = map_topology(star(3, shape=GBIT))
    theta = np.array([10_000.0, 8.0, 10.0])  # 10 us per hop, 0.125 B/ns, 10 ns endpoint delay
    rows = []
    for coll, alg, group in ((Collective.ALL_REDUCE, Algorithm.RING, (0, 1)),
                             (Collective.SEND_RECV, Algorithm.P2P, (0, 2))):
        for size in (65536, 1 << 20, 8 << 20):
            op = CommOp(coll, alg, len(group), size)
            rows.append(Measurement(coll, alg, len(group), size, model_ns(op, mapping, theta, group=group) / 1000,
                                    groups=(group,)))
    return estimate_calibrated(trace, mapping, calibrate(rows, mapping))


def test_a_send_ready_beside_a_collective_waits_for_the_slot_and_is_named() -> None:
    est = _calibrated(_trace())
    # the 8 MiB all-reduce on 2 ranks moves 8 MiB each way at 0.125 B/ns: ~67 ms; the send waits all of it
    assert "rank 0's 'send.act' waited 6" in est.slot_note and "behind 'allreduce.dp'" in est.slot_note
    assert est.ranks[2].iteration_ns > 67e6 + SEND_BYTES / 0.125  # the receiver got it after the all-reduce
    # the other way round: the collective issued second waits behind the send (8 ms), still over 1%
    other = _calibrated(_trace(send_first=True))
    assert "rank 0's 'allreduce.dp' waited 8" in other.slot_note and "behind 'send.act'" in other.slot_note
    assert other.ranks[2].iteration_ns < 10e6


def test_no_note_where_nothing_waited_for_the_slot() -> None:
    est = _calibrated(_trace(send_after_all_reduce=True))
    assert est.slot_note == ""


def test_sends_beside_collectives_asks_for_the_fabric_row() -> None:
    assert sends_beside_collectives(_trace())
    only_collectives = make_trace([[collective_node(0, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=64)]] * 2)
    assert not sends_beside_collectives(only_collectives)
    only_p2p = make_trace([[send_node(0, "s", rank=0, peer=1, size_bytes=64)],
                           [recv_node(0, "r", rank=1, peer=0, size_bytes=64)]])
    assert not sends_beside_collectives(only_p2p)
