"""Lockstep transfer plans: the common language of the schedule generators.

A generator describes its collective as a *plan*: a tuple of global steps, each a tuple of `Transfer`s (one
rank's region to another's) and `LocalCopy`s, in element units. A transfer sits at the same step index on
both of its ranks, so plans compose freely:

- `sequential(a, b)`  runs plan ``b`` after plan ``a``;
- `concurrent(a, b)`  runs both side by side (step ``t`` holds both plans' step ``t``);
- `pipelined(parts)`  starts part ``c`` one step after part ``c - 1`` (step ``t`` holds part ``c``'s step
  ``t - c``), the way NCCL streams chunks through a ring or a tree.

Composed parts must touch disjoint regions (the generators pipeline over disjoint chunks of the buffer).
`to_schedule` turns a plan into the `Schedule` data model: byte offsets, zero-size transfers dropped, steps that
are empty for every rank dropped. Every rank of the group gets the same number of steps (a rank with nothing to
do in a global step gets an empty `Step`), so step ``i`` means the same moment of the algorithm on all ranks.
Within a step, the sends one rank addresses to one peer appear in the same order as the peer's receives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from genie.core.collective import ROOTED, Algorithm, Collective
from genie.core.errors import InputError
from genie.core.schedule import Buffer, CollectiveOp, Copy, RankSchedule, Recv, Schedule, Send, Step


class InvalidCollectiveOp(InputError, ValueError):
    """A CollectiveOp no schedule can be built for (bad size, group, root, peer or chunk count)."""


@dataclass(frozen=True)
class Transfer:
    """``count`` elements from ``src``'s region to ``dst``'s region (global ranks), optionally summed in."""

    src: int
    dst: int
    src_elem: int
    dst_elem: int
    count: int
    reduce: bool = False
    src_buffer: Buffer = Buffer.DATA
    dst_buffer: Buffer = Buffer.DATA


@dataclass(frozen=True)
class LocalCopy:
    rank: int
    src_buffer: Buffer
    src_elem: int
    dst_buffer: Buffer
    dst_elem: int
    count: int


Action = Transfer | LocalCopy
PlanStep = tuple[Action, ...]
Plan = tuple[PlanStep, ...]


def region(src: int, dst: int, lo: int, hi: int, *, reduce: bool = False) -> Transfer:
    """Elements ``[lo, hi)`` of DATA from ``src`` to the same place on ``dst``."""
    return Transfer(src, dst, lo, lo, hi - lo, reduce)


def block_bounds(count: int, parts: int) -> tuple[int, ...]:
    """Split ``count`` elements into ``parts`` contiguous blocks as evenly as possible: the first
    ``count % parts`` blocks get one element more. Returns ``parts + 1`` boundaries, block ``i`` being
    ``[bounds[i], bounds[i + 1])``."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    base, extra = divmod(count, parts)
    bounds = [0]
    for i in range(parts):
        bounds.append(bounds[-1] + base + (1 if i < extra else 0))
    return tuple(bounds)


def sub_bounds(lo: int, hi: int, parts: int) -> tuple[int, ...]:
    """`block_bounds` of the element range ``[lo, hi)``."""
    return tuple(lo + b for b in block_bounds(hi - lo, parts))


def part_blocks(bounds: Sequence[int], chunks: int) -> list[list[tuple[int, int]]]:
    """Pipeline parts of a blocked buffer: ``result[c][b]`` is the ``c``-th of ``chunks`` sub-ranges of block
    ``b`` (blocks given by ``bounds``)."""
    per_block = [sub_bounds(bounds[b], bounds[b + 1], chunks) for b in range(len(bounds) - 1)]
    return [[(sb[c], sb[c + 1]) for sb in per_block] for c in range(chunks)]


def alltoall_block_count(count: int, n: int) -> int:
    """Elements each rank sends to each peer in an all-to-all: ``count // n`` (nccl-tests rounds down; the
    ``count % n`` trailing elements are not exchanged)."""
    return count // n


def sequential(*plans: Plan) -> Plan:
    return tuple(step for plan in plans for step in plan)


def concurrent(*plans: Plan) -> Plan:
    length = max((len(p) for p in plans), default=0)
    return tuple(tuple(a for p in plans if t < len(p) for a in p[t]) for t in range(length))


def pipelined(parts: Sequence[Plan]) -> Plan:
    length = max((c + len(p) for c, p in enumerate(parts) if p), default=0)
    return tuple(tuple(a for c, p in enumerate(parts) if 0 <= t - c < len(p) for a in p[t - c])
                 for t in range(length))


def element_count(op: CollectiveOp, collective: Collective | None = None) -> int:
    """Validate ``op`` (optionally that it is a ``collective``) and return its element count."""
    def bad(field: str, message: str) -> InvalidCollectiveOp:
        return InvalidCollectiveOp(message, source="collective op", path=field)

    if collective is not None and op.collective is not collective:
        raise bad("collective", f"expected {collective.value}, got {op.collective.value}")
    if not op.group:
        raise bad("group", "group is empty")
    if len(set(op.group)) != len(op.group):
        raise bad("group", f"group lists a rank twice: {op.group}")
    if op.dtype_bytes < 1:
        raise bad("dtype_bytes", f"must be >= 1, got {op.dtype_bytes}")
    if op.size_bytes < 0 or op.size_bytes % op.dtype_bytes:
        raise bad("size_bytes", f"must be a non-negative multiple of dtype_bytes={op.dtype_bytes}, "
                                f"got {op.size_bytes}")
    if op.chunks < 1:
        raise bad("chunks", f"must be >= 1, got {op.chunks}")
    if (op.collective in ROOTED or op.collective is Collective.SEND_RECV) and op.root not in op.group:
        raise bad("root", f"root {op.root} is not in group {op.group}")
    if op.collective is Collective.SEND_RECV:
        if op.peer is None or op.peer not in op.group:
            raise bad("peer", f"peer {op.peer} is not in group {op.group}")
        if op.peer == op.root:
            raise bad("peer", f"peer equals root ({op.root})")
    if op.split_bytes:
        _check_splits(op, bad)
    return op.size_bytes // op.dtype_bytes


def _check_splits(op: CollectiveOp, bad) -> None:
    n, m = len(op.group), op.split_bytes
    if op.collective is not Collective.ALL_TO_ALL:
        raise bad("split_bytes", f"per-peer sizes are for an all-to-all, not {op.collective.value}")
    if len(m) != n or any(len(row) != n for row in m):
        raise bad("split_bytes", f"expected {n} rows of {n} sizes (one per group member)")
    if any(b < 0 or b % op.dtype_bytes for row in m for b in row):
        raise bad("split_bytes", f"sizes must be non-negative multiples of dtype_bytes={op.dtype_bytes}")
    largest = max(max(sum(row) for row in m), max(sum(row[j] for row in m) for j in range(n)))
    if largest > op.size_bytes:
        raise bad("split_bytes", f"a member sends or receives {largest} B, more than size_bytes={op.size_bytes}")


def to_schedule(op: CollectiveOp, algorithm: Algorithm, plan: Iterable[PlanStep]) -> Schedule:
    """The `Schedule` of ``plan`` for ``op``: byte units, zero-size actions and globally empty steps dropped."""
    e = op.dtype_bytes
    steps: dict[int, list[Step]] = {rank: [] for rank in op.group}
    for plan_step in plan:
        sends: dict[int, list[Send]] = {}
        recvs: dict[int, list[Recv]] = {}
        copies: dict[int, list[Copy]] = {}
        for a in plan_step:
            if a.count <= 0:
                continue
            if isinstance(a, Transfer):
                sends.setdefault(a.src, []).append(Send(a.dst, a.src_elem * e, a.count * e, a.src_buffer))
                recvs.setdefault(a.dst, []).append(Recv(a.src, a.dst_elem * e, a.count * e, a.dst_buffer,
                                                        a.reduce))
            else:
                copies.setdefault(a.rank, []).append(Copy(a.src_buffer, a.src_elem * e, a.dst_buffer,
                                                          a.dst_elem * e, a.count * e))
        if not (sends or recvs or copies):
            continue
        for rank, rank_steps in steps.items():
            rank_steps.append(Step(tuple(sends.get(rank, ())), tuple(recvs.get(rank, ())),
                                   tuple(copies.get(rank, ()))))
    ranks = tuple(RankSchedule(rank, tuple(rank_steps)) for rank, rank_steps in steps.items())
    return Schedule(op, algorithm, ranks)
