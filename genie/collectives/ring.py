"""Ring algorithms: reduce-scatter, all-gather, all-reduce and pipelined broadcast.

The ring is the group in its given order: position ``i`` sends to ``i + 1`` and receives from ``i - 1``
(mod n). The buffer is cut into ``n`` blocks of elements (`block_bounds`; block ``i`` belongs to position ``i``).
With ``op.chunks = k > 1`` every block is cut into ``k`` sub-blocks and the ring runs ``k`` times, on sub-block
``c`` of every block, each run starting one step after the previous one (NCCL-style pipelining): the step
count grows by ``k - 1``, the bytes each rank sends stay the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import CollectiveOp, Schedule
from genie.collectives.plan import (Plan, block_bounds, element_count, part_blocks, pipelined, region,
                                    sequential, to_schedule)

Blocks = Sequence[tuple[int, int]]


def reduce_scatter_block(position, step, n):
    """The block ring position ``position`` sends at reduce-scatter step ``step``: (i-s-1) mod n (ints, or numpy
    arrays for `genie.collectives.sends`)."""
    return (position - step - 1) % n


def allgather_block(position, step, n):
    """The block ring position ``position`` forwards at all-gather step ``step``: (i-s) mod n."""
    return (position - step) % n


def ring_reduce_scatter_plan(ring: Sequence[int], blocks: Blocks) -> Plan:
    """n-1 steps; at step s position i sends block (i-s-1) to i+1, which sums it in. Position i ends holding
    the sum of block i."""
    n = len(ring)
    return tuple(
        tuple(region(ring[i], ring[(i + 1) % n], *blocks[reduce_scatter_block(i, s, n)], reduce=True)
              for i in range(n))
        for s in range(n - 1))


def ring_allgather_plan(ring: Sequence[int], blocks: Blocks) -> Plan:
    """n-1 steps; at step s position i forwards block (i-s) to i+1. Position i starts with block i."""
    n = len(ring)
    return tuple(
        tuple(region(ring[i], ring[(i + 1) % n], *blocks[allgather_block(i, s, n)]) for i in range(n))
        for s in range(n - 1))


def _ring_parts(op: CollectiveOp, collective: Collective) -> list[list[tuple[int, int]]]:
    count = element_count(op, collective)
    return part_blocks(block_bounds(count, len(op.group)), op.chunks)


def ring_allreduce(op: CollectiveOp) -> Schedule:
    """Reduce-scatter then all-gather: 2(n-1) + chunks-1 steps, each rank sends 2(n-1)/n x S bytes."""
    parts = _ring_parts(op, Collective.ALL_REDUCE)
    plan = pipelined([sequential(ring_reduce_scatter_plan(op.group, p), ring_allgather_plan(op.group, p))
                      for p in parts])
    return to_schedule(op, Algorithm.RING, plan)


def ring_reduce_scatter(op: CollectiveOp) -> Schedule:
    """n-1 + chunks-1 steps, each rank sends (n-1)/n x S bytes (S = total input buffer)."""
    parts = _ring_parts(op, Collective.REDUCE_SCATTER)
    return to_schedule(op, Algorithm.RING, pipelined([ring_reduce_scatter_plan(op.group, p) for p in parts]))


def ring_allgather(op: CollectiveOp) -> Schedule:
    """n-1 + chunks-1 steps, each rank sends (n-1)/n x S bytes (S = total output buffer)."""
    parts = _ring_parts(op, Collective.ALL_GATHER)
    return to_schedule(op, Algorithm.RING, pipelined([ring_allgather_plan(op.group, p) for p in parts]))


def pipelined_ring_broadcast(op: CollectiveOp) -> Schedule:
    """A chain from the root along the ring; the buffer is cut into ``chunks`` pieces that follow each other
    one step apart: n-1 + chunks-1 steps. The root sends S bytes, every other rank but the chain's last
    forwards S bytes."""
    count = element_count(op, Collective.BROADCAST)
    n = len(op.group)
    start = op.group.index(op.root)
    chain = [op.group[(start + h) % n] for h in range(n)]
    bounds = block_bounds(count, op.chunks)
    parts = [tuple((region(chain[h], chain[h + 1], bounds[c], bounds[c + 1]),) for h in range(n - 1))
             for c in range(op.chunks)]
    return to_schedule(op, Algorithm.PIPELINED_RING, pipelined(parts))
