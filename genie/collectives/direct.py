"""Direct algorithms (every rank talks to every other rank) and point-to-point send/receive.

Direct collectives use n-1 *shifted* steps (MPI's pairwise exchange): at step s = 1..n-1 position i sends to
position i+s and receives from position i-s (mod n). Every step is a permutation, so each rank sends one
message and receives one message per step: no deadlock (each send meets its receive in the same step) and the
load is spread evenly over peers and over time. NCCL instead posts all of an all-to-all's transfers at once;
the shifted form is used here because it keeps one flow per rank and direction in every step, which makes
per-step measurements readable. ``op.chunks`` is ignored.
"""

from __future__ import annotations

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import Buffer, CollectiveOp, Schedule
from genie.collectives.plan import (LocalCopy, Transfer, alltoall_block_count, block_bounds, element_count,
                                    region, to_schedule)


def direct_alltoall(op: CollectiveOp) -> Schedule:
    """Each rank sends block j of its DATA (``count // n`` elements, nccl-tests rounding) to position j, which
    stores it as block i of its OUTPUT; the own block is copied DATA -> OUTPUT in the first step.
    n-1 steps (1 for a single rank); each rank sends (n-1)/n x S bytes."""
    count = element_count(op, Collective.ALL_TO_ALL)
    group = op.group
    n = len(group)
    b = alltoall_block_count(count, n)
    steps = [[LocalCopy(group[i], Buffer.DATA, i * b, Buffer.OUTPUT, i * b, b) for i in range(n)]]
    steps += [[] for _ in range(n - 2)]
    for s in range(1, n):
        for i in range(n):
            j = (i + s) % n
            steps[s - 1].append(Transfer(group[i], group[j], j * b, i * b, b,
                                         src_buffer=Buffer.DATA, dst_buffer=Buffer.OUTPUT))
    return to_schedule(op, Algorithm.DIRECT, tuple(tuple(s) for s in steps))


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


def p2p_send_recv(op: CollectiveOp) -> Schedule:
    """``op.root`` sends its whole DATA buffer (S bytes) to ``op.peer`` in one step; other group ranks idle."""
    count = element_count(op, Collective.SEND_RECV)
    assert op.peer is not None  # checked by element_count
    return to_schedule(op, Algorithm.P2P, ((region(op.root, op.peer, 0, count),),))
