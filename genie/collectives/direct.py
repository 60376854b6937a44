"""Direct algorithms (every rank talks to every other rank) and point-to-point send/receive.

All-to-all posts all of its transfers at once, in one step, as NCCL does (a group of sends and receives to
every peer): every link carries n-1 concurrent flows and stays busy until the last byte, where the pairwise
exchange (n-1 steps, one peer per step) loses a little at every step boundary — measured on an 8-host
1 Gbit/s star: 0.108-0.113 GB/s busbw at once against 0.095-0.098 pairwise. The sends are listed in the
shifted order i+1, i+2, ... so no receiver is everybody's first. Direct all-gather and reduce-scatter use the
n-1 *shifted* steps of MPI's pairwise exchange: at step s = 1..n-1 position i sends to position i+s and
receives from position i-s (mod n); every step is a permutation (no deadlock, load spread evenly) and keeps
one flow per rank and direction, which makes per-step measurements readable. ``op.chunks`` is ignored.
"""

from __future__ import annotations

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import Buffer, CollectiveOp, Schedule
from genie.collectives.plan import (LocalCopy, Transfer, alltoall_block_count, block_bounds, element_count,
                                    region, to_schedule)


def direct_alltoall(op: CollectiveOp) -> Schedule:
    """Each rank sends block j of its DATA (``count // n`` elements, nccl-tests rounding) to position j, which
    stores it as block i of its OUTPUT; the own block is copied DATA -> OUTPUT. One step with every transfer
    (none for a single rank); each rank sends (n-1)/n x S bytes. With ``op.split_bytes`` (all-to-allv) the
    blocks are the splits: position i sends ``split_bytes[i][j]`` to j, packed in j order in i's DATA and in i
    order in j's OUTPUT."""
    count = element_count(op, Collective.ALL_TO_ALL)
    group = op.group
    n = len(group)
    if op.split_bytes:
        return _direct_alltoallv(op)
    b = alltoall_block_count(count, n)
    step = [LocalCopy(group[i], Buffer.DATA, i * b, Buffer.OUTPUT, i * b, b) for i in range(n)]
    step += [Transfer(group[i], group[(i + s) % n], ((i + s) % n) * b, i * b, b,
                      src_buffer=Buffer.DATA, dst_buffer=Buffer.OUTPUT)
             for s in range(1, n) for i in range(n)]
    return to_schedule(op, Algorithm.DIRECT, (tuple(step),))


def _direct_alltoallv(op: CollectiveOp) -> Schedule:
    group, n, e = op.group, len(op.group), op.dtype_bytes
    m = [[b // e for b in row] for row in op.split_bytes]  # elements
    send_at = [[sum(m[i][:j]) for j in range(n)] for i in range(n)]  # where i's block for j starts in its DATA
    recv_at = [[sum(m[k][j] for k in range(i)) for j in range(n)] for i in range(n)]  # where j puts i's block
    step = [LocalCopy(group[i], Buffer.DATA, send_at[i][i], Buffer.OUTPUT, recv_at[i][i], m[i][i]) for i in range(n)]
    step += [Transfer(group[i], group[(i + s) % n], send_at[i][(i + s) % n], recv_at[i][(i + s) % n],
                      m[i][(i + s) % n], src_buffer=Buffer.DATA, dst_buffer=Buffer.OUTPUT)
             for s in range(1, n) for i in range(n)]
    return to_schedule(op, Algorithm.DIRECT, (tuple(step),))


def direct_allgather(op: CollectiveOp) -> Schedule:
    """n-1 steps; at step s position i sends its block to i+s. Each rank sends (n-1)/n x S bytes."""
    count = element_count(op, Collective.ALL_GATHER)
    group = op.group
    n = len(group)
    bounds = block_bounds(count, n)
    plan = tuple(tuple(region(group[i], group[(i + s) % n], bounds[i], bounds[i + 1]) for i in range(n))
                 for s in range(1, n))
    return to_schedule(op, Algorithm.DIRECT, plan)


def direct_reduce_scatter(op: CollectiveOp) -> Schedule:
    """n-1 steps; at step s position i sends block i+s to its owner, which sums it in. Each rank sends
    (n-1)/n x S bytes."""
    count = element_count(op, Collective.REDUCE_SCATTER)
    group = op.group
    n = len(group)
    bounds = block_bounds(count, n)
    plan = tuple(tuple(region(group[i], group[(i + s) % n], bounds[(i + s) % n], bounds[(i + s) % n + 1],
                              reduce=True) for i in range(n))
                 for s in range(1, n))
    return to_schedule(op, Algorithm.DIRECT, plan)


def ring_shift_send_recv(op: CollectiveOp) -> Schedule:
    """nccl-tests' sendrecv: every position i sends its whole DATA (S bytes) to position i+1, which receives it
    into OUTPUT, and receives from i-1, all in one step (a group of one send and one receive per rank).
    ``op.root``/``op.peer`` are not used. Each rank sends and receives S bytes."""
    count = element_count(op, Collective.SEND_RECV)
    group = op.group
    n = len(group)
    step = tuple(Transfer(group[i], group[(i + 1) % n], 0, 0, count, src_buffer=Buffer.DATA,
                          dst_buffer=Buffer.OUTPUT) for i in range(n)) if n > 1 else ()
    return to_schedule(op, Algorithm.RING, (step,))


def ping_pong_send_recv(op: CollectiveOp) -> Schedule:
    """OSU's latency test: ``op.root`` sends its DATA to ``op.peer``, which sends it back, in two steps; an
    iteration is one round trip (the one-way latency is half of it)."""
    count = element_count(op, Collective.SEND_RECV)
    assert op.peer is not None  # checked by element_count
    return to_schedule(op, Algorithm.PING_PONG, ((region(op.root, op.peer, 0, count),),
                                                 (region(op.peer, op.root, 0, count),)))


def p2p_send_recv(op: CollectiveOp) -> Schedule:
    """``op.root`` sends its whole DATA buffer (S bytes) to ``op.peer`` in one step; other group ranks idle."""
    count = element_count(op, Collective.SEND_RECV)
    assert op.peer is not None  # checked by element_count
    return to_schedule(op, Algorithm.P2P, ((region(op.root, op.peer, 0, count),),))
