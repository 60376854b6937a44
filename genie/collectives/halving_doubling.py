"""Halving-doubling (Rabenseifner): recursive-halving reduce-scatter and recursive-doubling all-gather.

For ``n = p + r`` ranks with ``p`` the largest power of two ``<= n``, the first ``2r`` positions are folded
in pairs as MPICH does: in a pre-step every even position ``2i < 2r`` hands its data to ``2i + 1``, the ``p``
remaining "active" ranks (new rank ``j`` is position ``2j + 1`` for ``j < r``, else ``j + r``) run the
power-of-two algorithm, and a post-step hands the result back to the folded ranks. Powers of two need no
fold.

Recursive halving exchanges with the partner at distance p/2, p/4, ..., 1 (keeping the half that contains
its own block, so new rank ``j`` ends with block ``j``); recursive doubling goes the other way round
(1, 2, ..., p/2). Each exchange is a pairwise send/receive within one step, so the schedule is deadlock-free.
``op.chunks`` is ignored: the algorithm targets latency, not pipelining.

Step counts: all-reduce 2 log2 p (+2 with a fold), reduce-scatter and all-gather log2 p (+2 with a fold).
Bytes per active rank for n = p: all-reduce 2(n-1)/n x S, reduce-scatter and all-gather (n-1)/n x S.
"""

from __future__ import annotations

from collections.abc import Sequence

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import CollectiveOp, Schedule
from genie.collectives.plan import Plan, block_bounds, element_count, region, sequential, to_schedule


def fold(n: int) -> tuple[int, int]:
    """``(p, r)``: the largest power of two ``p <= n`` and the number ``r = n - p`` of folded ranks."""
    p = 1 << (n.bit_length() - 1)
    return p, n - p


def _first_position(j: int, r: int) -> int:
    """The lowest group position that new rank ``j`` stands for (``2j`` and ``2j+1`` when folded)."""
    return 2 * j if j < r else j + r


def _active_ranks(group: Sequence[int]) -> list[int]:
    p, r = fold(len(group))
    return [group[2 * j + 1] if j < r else group[j + r] for j in range(p)]


def recursive_halving_plan(active: Sequence[int], bounds: Sequence[int]) -> Plan:
    """log2 p steps; new rank j ends with the sum over ``active`` of block j (``bounds`` has p+1 entries)."""
    p = len(active)
    lo, hi = [0] * p, [p] * p
    steps = []
    distance = p // 2
    while distance >= 1:
        step = []
        for j in range(p):
            mid = lo[j] + distance
            if j & distance:
                send, keep = (lo[j], mid), (mid, hi[j])
            else:
                send, keep = (mid, hi[j]), (lo[j], mid)
            step.append(region(active[j], active[j ^ distance], bounds[send[0]], bounds[send[1]], reduce=True))
            lo[j], hi[j] = keep
        steps.append(tuple(step))
        distance //= 2
    return tuple(steps)


def recursive_doubling_plan(active: Sequence[int], bounds: Sequence[int]) -> Plan:
    """log2 p steps; new rank j starts with block j and ends with all blocks."""
    p = len(active)
    steps = []
    distance = 1
    while distance < p:
        step = []
        for j in range(p):
            base = j - j % distance
            step.append(region(active[j], active[j ^ distance], bounds[base], bounds[base + distance]))
        steps.append(tuple(step))
        distance *= 2
    return tuple(steps)


def _fold_in_full(group: Sequence[int], count: int) -> Plan:
    _, r = fold(len(group))
    return (tuple(region(group[2 * i], group[2 * i + 1], 0, count, reduce=True) for i in range(r)),) if r else ()


def _super_bounds(n: int, bounds: Sequence[int]) -> list[int]:
    """Boundaries of the p super-blocks: new rank j's blocks (two for a folded pair)."""
    p, r = fold(n)
    return [bounds[_first_position(j, r)] for j in range(p)] + [bounds[n]]


def halving_doubling_allreduce(op: CollectiveOp) -> Schedule:
    count = element_count(op, Collective.ALL_REDUCE)
    group = op.group
    p, r = fold(len(group))
    active = _active_ranks(group)
    bounds = block_bounds(count, p)
    unfold: Plan = (tuple(region(group[2 * i + 1], group[2 * i], 0, count) for i in range(r)),) if r else ()
    plan = sequential(_fold_in_full(group, count), recursive_halving_plan(active, bounds),
                      recursive_doubling_plan(active, bounds), unfold)
    return to_schedule(op, Algorithm.HALVING_DOUBLING, plan)


def recursive_doubling_allreduce(op: CollectiveOp) -> Schedule:
    """MPICH's short-message all-reduce: log2 p steps, each a pairwise exchange of the whole buffer with the
    partner at distance 1, 2, ..., p/2 (+ fold/unfold steps when n is not a power of two). Each rank sends
    log2 p x S bytes: more than ring or halving-doubling, but in the fewest steps, which is what small
    (latency-bound) messages need."""
    count = element_count(op, Collective.ALL_REDUCE)
    group = op.group
    p, r = fold(len(group))
    active = _active_ranks(group)
    exchanges = []
    distance = 1
    while distance < p:
        exchanges.append(tuple(region(active[j], active[j ^ distance], 0, count, reduce=True) for j in range(p)))
        distance *= 2
    unfold: Plan = (tuple(region(group[2 * i + 1], group[2 * i], 0, count) for i in range(r)),) if r else ()
    plan = sequential(_fold_in_full(group, count), tuple(exchanges), unfold)
    return to_schedule(op, Algorithm.RECURSIVE_DOUBLING, plan)


def halving_doubling_reduce_scatter(op: CollectiveOp) -> Schedule:
    count = element_count(op, Collective.REDUCE_SCATTER)
    group = op.group
    n = len(group)
    _, r = fold(n)
    bounds = block_bounds(count, n)
    unfold: Plan = (tuple(region(group[2 * i + 1], group[2 * i], bounds[2 * i], bounds[2 * i + 1])
                          for i in range(r)),) if r else ()
    plan = sequential(_fold_in_full(group, count),
                      recursive_halving_plan(_active_ranks(group), _super_bounds(n, bounds)), unfold)
    return to_schedule(op, Algorithm.HALVING_DOUBLING, plan)


def halving_doubling_allgather(op: CollectiveOp) -> Schedule:
    count = element_count(op, Collective.ALL_GATHER)
    group = op.group
    n = len(group)
    _, r = fold(n)
    bounds = block_bounds(count, n)
    fold_in: Plan = (tuple(region(group[2 * i], group[2 * i + 1], bounds[2 * i], bounds[2 * i + 1])
                           for i in range(r)),) if r else ()
    unfold: Plan = (tuple(t for i in range(r) for t in (
        region(group[2 * i + 1], group[2 * i], 0, bounds[2 * i]),
        region(group[2 * i + 1], group[2 * i], bounds[2 * i + 1], count))),) if r else ()
    plan = sequential(fold_in, recursive_doubling_plan(_active_ranks(group), _super_bounds(n, bounds)), unfold)
    return to_schedule(op, Algorithm.HALVING_DOUBLING, plan)
