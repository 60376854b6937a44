"""PAT ("parallel aggregated trees"): NCCL's log-step all-gather and reduce-scatter (NCCL >= 2.23, one rank
per node).

Facts carried over from NCCL's public source (`PatAGAlgorithm` / `PatRSAlgorithm` in src/include/collectives.h,
`ncclTransportPatConnect` in src/transport/generic.cc); the code is genie's own.

- **Peers.** Dimension ``d`` connects position ``x`` to ``x - 2^d`` (sends) and ``x + 2^d`` (receives), mod n,
  for every ``2^d < n``: ceil(log2 n) peers per direction.
- **All-gather.** The block of position ``q`` reaches position ``q - s`` (offset ``s`` in 1..n-1) by hops of
  ``-2^d`` over the set bits ``d`` of ``s``, highest bit first. Hence one *message* per offset: at offset
  ``s`` (lowest set bit ``d``) every position ``x`` sends the block of ``x + s - 2^d`` — its own block when
  ``s = 2^d``, else one it received at offset ``s - 2^d`` — to ``x - 2^d``. Each block is sent n-1 times in
  all, once per destination: every rank sends (n-1)/n x S bytes, like the ring.
- **Reduce-scatter** is the same tree mirrored and run backwards: at offset ``s`` (lowest bit ``d``) position
  ``x`` sends its partial sum of block ``x - s`` to ``x - 2^d``, after the partials of that block from
  ``x + 2^e`` (the offsets ``s + 2^e``, ``e < d``) were summed in; lowest bits first.
- **Aggregation.** NCCL sends up to ``A`` (aggFactor, a power of two) messages of one dimension as one
  transfer per step. ``A`` doubles from 1 while the per-rank block fits a buffer step at least twice over
  (``PAT_STEP_BYTES // (block x A) >= 2``), then up to three times more (NCCL_STEPS = 8 of buffer depth),
  never beyond the first power of two ``>= n // 2``; ``D = 2^ceil(log2 n) / A`` (aggDelta). Dimensions
  ``d >= log2 D`` send all their messages in one step each, highest first; a lower dimension sends the
  messages sharing one residue ``s mod D`` per step. So every group of up to 17 ranks (``A >= 8``) runs at
  NCCL's full aggregation: ceil(log2 n) steps for a power of two, a few more otherwise (n = 5: 4 steps, the
  offsets 4 | 2 | 1 | 3). Reduce-scatter runs the all-gather's steps in reverse order.

Offsets ``s >= n`` are skipped, as NCCL skips them, so any n works. ``op.chunks`` is ignored (PAT targets
latency; NCCL walks its chunks through the same steps one after another).
"""

from __future__ import annotations

from collections.abc import Sequence

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import CollectiveOp, Schedule
from genie.collectives.plan import Plan, block_bounds, element_count, region, to_schedule

#: NCCL's Simple-protocol step: the 4 MiB buffer over NCCL_STEPS = 8 slots (the stepSize PAT aggregates into)
PAT_STEP_BYTES = (4 << 20) // 8
#: NCCL_STEPS: how many buffer steps deep PAT may aggregate beyond what one step holds
PAT_STEP_DEPTH = 8


def _lowest_bit(s: int) -> int:
    return (s & -s).bit_length() - 1


def _ceil_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def aggregation(n: int, block_bytes: int) -> int:
    """NCCL's aggFactor ``A``: how many messages of one dimension go as one transfer (a power of two)."""
    limit = n // 2
    factor = 1
    while factor < limit and PAT_STEP_BYTES // max(1, block_bytes * factor) >= 2:
        factor *= 2
    depth = PAT_STEP_DEPTH
    while depth > 1 and factor < limit:
        depth //= 2
        factor *= 2
    return factor


def allgather_offset_steps(n: int, factor: int) -> tuple[tuple[int, ...], ...]:
    """The all-gather's steps as the offsets each sends (every offset of 1..n-1 exactly once, one dimension per
    step, an offset after the one its block came in at)."""
    if n < 2:
        return ()
    delta = max(1, _ceil_pow2(n) // factor)
    high = delta.bit_length() - 1  # dimensions >= high: one step each
    groups: dict[tuple[int, int], list[int]] = {}
    for s in range(1, n):
        d = _lowest_bit(s)
        residue = 0 if d >= high else s % delta
        groups.setdefault((-d, residue), []).append(s)
    return tuple(tuple(groups[key]) for key in sorted(groups))


def _steps(op: CollectiveOp, collective: Collective) -> tuple[Sequence[int], tuple[tuple[int, ...], ...], list]:
    count = element_count(op, collective)
    n = len(op.group)
    bounds = block_bounds(count, n)
    return bounds, allgather_offset_steps(n, aggregation(n, op.size_bytes // max(1, n))), list(op.group)


def pat_allgather(op: CollectiveOp) -> Schedule:
    bounds, steps, group = _steps(op, Collective.ALL_GATHER)
    n = len(group)
    plan: Plan = tuple(
        tuple(region(group[x], group[(x - (1 << _lowest_bit(s))) % n],
                     bounds[(x + s - (1 << _lowest_bit(s))) % n], bounds[(x + s - (1 << _lowest_bit(s))) % n + 1])
              for x in range(n) for s in offsets)
        for offsets in steps)
    return to_schedule(op, Algorithm.PAT, plan)


def pat_reduce_scatter(op: CollectiveOp) -> Schedule:
    bounds, steps, group = _steps(op, Collective.REDUCE_SCATTER)
    n = len(group)
    plan: Plan = tuple(
        tuple(region(group[x], group[(x - (1 << _lowest_bit(s))) % n],
                     bounds[(x - s) % n], bounds[(x - s) % n + 1], reduce=True)
              for x in range(n) for s in offsets)
        for offsets in reversed(steps))
    return to_schedule(op, Algorithm.PAT, plan)
