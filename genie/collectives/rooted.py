"""Reduce, gather, scatter and barrier: the collectives PyTorch traces carry beyond NCCL's five.

- **reduce** (NCCL's only algorithm for it: the ring): a chain along the ring that *ends* at the root, starting
  at the root's successor; every hop sums what it receives into its buffer and passes it on. The buffer is cut
  into ``chunks`` pieces that follow each other one step apart (NCCL pipelines its slices the same way):
  n-1 + chunks-1 steps; every rank but the root sends S bytes. The sum lands in the root's DATA; the other
  ranks' buffers hold partial sums (NCCL leaves their receive buffer undefined too).
- **gather** / **scatter**: NCCL has neither; PyTorch's NCCL backend and nccl-tests' gather/scatter run them as
  one group of sends and receives between the root and every other rank, all at once — so do these. Block i of
  the buffer (``block_bounds``) belongs to group position i: gather moves each rank's block i to the root's
  block i, scatter the root's block i to rank i. Sizes are nccl-tests': the whole buffer, n x one rank's piece.
- **barrier**: a dissemination barrier (gloo's and MPICH's): ceil(log2 n) rounds; in round k position i sends
  a one-element token to i + 2^k and receives one from i - 2^k. No rank leaves before every rank has arrived.
  The op carries no data (``size_bytes`` 0); the token goes from DATA to OUTPUT, one element each.
"""

from __future__ import annotations

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import Buffer, CollectiveOp, Schedule
from genie.collectives.plan import Transfer, block_bounds, element_count, pipelined, region, to_schedule


def pipelined_ring_reduce(op: CollectiveOp) -> Schedule:
    count = element_count(op, Collective.REDUCE)
    n = len(op.group)
    root = op.group.index(op.root)
    chain = [op.group[(root + 1 + h) % n] for h in range(n)]  # ends at the root
    bounds = block_bounds(count, op.chunks)
    parts = [tuple((region(chain[h], chain[h + 1], bounds[c], bounds[c + 1], reduce=True),) for h in range(n - 1))
             for c in range(op.chunks)]
    return to_schedule(op, Algorithm.PIPELINED_RING, pipelined(parts))


def direct_gather(op: CollectiveOp) -> Schedule:
    count = element_count(op, Collective.GATHER)
    bounds = block_bounds(count, len(op.group))
    step = tuple(region(rank, op.root, bounds[i], bounds[i + 1]) for i, rank in enumerate(op.group)
                 if rank != op.root)
    return to_schedule(op, Algorithm.DIRECT, (step,))


def direct_scatter(op: CollectiveOp) -> Schedule:
    count = element_count(op, Collective.SCATTER)
    bounds = block_bounds(count, len(op.group))
    step = tuple(region(op.root, rank, bounds[i], bounds[i + 1]) for i, rank in enumerate(op.group)
                 if rank != op.root)
    return to_schedule(op, Algorithm.DIRECT, (step,))


def dissemination_barrier(op: CollectiveOp) -> Schedule:
    element_count(op, Collective.BARRIER)
    group = op.group
    n = len(group)
    plan, distance = [], 1
    while distance < n:
        plan.append(tuple(Transfer(group[i], group[(i + distance) % n], 0, 0, 1, src_buffer=Buffer.DATA,
                                   dst_buffer=Buffer.OUTPUT) for i in range(n)))
        distance *= 2
    return to_schedule(op, Algorithm.DISSEMINATION, tuple(plan))
