"""Who sends how many bytes to whom at each step of a collective, without building its Schedule (pure, numpy).

A model of the network (astra_adapter's fabric model) needs only each step's messages: sender, receiver and
bytes. Building the `Schedule` for that costs Python objects per send, receive and step - two million of each
for a 1024-rank ring all-reduce, tens of seconds. `step_sends(op)` describes the steps as arrays instead: the
ring algorithms (all-reduce, reduce-scatter, all-gather, any ``chunks``) vectorised from the same block rules
their plans use (`genie.collectives.ring.reduce_scatter_block` / `allgather_block`), the direct all-to-allv
(uneven splits) from its plan's rule, every other algorithm read off its schedule (`schedule_sends`). Both give
the same result as `build_schedule(op)`: the steps it keeps (a step with no transfer and no copy is dropped),
each step's sends in the schedule's order (ranks in group order, a rank's sends in its order), zero-size
transfers left out (tests/test_collectives_sends.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import CollectiveOp, Schedule
from genie.collectives.plan import block_bounds, element_count, part_blocks
from genie.collectives.registry import build_schedule, choose_algorithm
from genie.collectives.ring import allgather_block, reduce_scatter_block


@dataclass(frozen=True, eq=False)
class SendStep:
    """One step's sends: ``src[k]`` sends ``size_bytes[k]`` bytes to ``dst[k]`` (global ranks, int64 arrays);
    ``messages``: the most sends one rank posts in the step."""

    src: np.ndarray
    dst: np.ndarray
    size_bytes: np.ndarray
    messages: int

    def as_tuples(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(zip(self.src.tolist(), self.dst.tolist(), self.size_bytes.tolist()))


def schedule_sends(schedule: Schedule) -> tuple[SendStep, ...]:
    """The sends of every step of ``schedule`` (every rank has the same number of steps)."""
    out = []
    for i in range(max((len(rs.steps) for rs in schedule.ranks), default=0)):
        src, dst, size, messages = [], [], [], 0
        for rs in schedule.ranks:
            posted = rs.steps[i].sends if i < len(rs.steps) else ()
            messages = max(messages, len(posted))
            for s in posted:
                src.append(rs.rank)
                dst.append(s.peer)
                size.append(s.size_bytes)
        out.append(SendStep(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                            np.array(size, dtype=np.int64), messages))
    return tuple(out)


_RING_PHASES = {Collective.ALL_REDUCE: (reduce_scatter_block, allgather_block),
                Collective.REDUCE_SCATTER: (reduce_scatter_block,),
                Collective.ALL_GATHER: (allgather_block,)}


def step_sends(op: CollectiveOp) -> tuple[SendStep, ...]:
    """The sends of every step of ``build_schedule(op)``, vectorised for the ring algorithms."""
    algorithm = op.algorithm
    if algorithm is Algorithm.AUTO:
        algorithm = choose_algorithm(op.collective, op.size_bytes, len(op.group))
    if algorithm is Algorithm.RING and op.collective in _RING_PHASES:
        return _ring_sends(op)
    if algorithm is Algorithm.DIRECT and op.collective is Collective.ALL_TO_ALL and op.split_bytes:
        return _direct_alltoallv_sends(op)
    return schedule_sends(build_schedule(op))


def _direct_alltoallv_sends(op: CollectiveOp) -> tuple[SendStep, ...]:
    """`genie.collectives.direct`'s all-to-allv plan as arrays: one step in which position ``i`` sends
    ``split_bytes[i][j]`` (whole elements) to each ``j = i + 1, i + 2, ...`` (mod n) in that order, zero-size
    sends left out; the step is dropped, as the schedule drops it, when nothing moves (no send and no own-block
    copy). A 1024-rank MoE trace's 8,192 uneven all-to-alls: ~1 ms of Python objects each through the schedule."""
    element_count(op, Collective.ALL_TO_ALL)  # the schedule's checks of the op and its splits
    n, e = len(op.group), op.dtype_bytes
    counts = np.array(op.split_bytes, dtype=np.int64).reshape(n, n) // e  # elements, [sender, receiver]
    position = np.arange(n)
    to = (position[:, None] + np.arange(1, n)[None, :]) % n  # [sender, s - 1]: its peer at shift s
    sent = counts[position[:, None], to]
    posted = sent > 0
    if not posted.any() and not (np.diagonal(counts) > 0).any():
        return ()
    group = np.array(op.group, dtype=np.int64)
    return (SendStep(np.repeat(group, n - 1)[posted.ravel()], group[to][posted], sent[posted] * e,
                     int(posted.sum(axis=1).max())),)


def _ring_sends(op: CollectiveOp) -> tuple[SendStep, ...]:
    """`genie.collectives.ring`'s plans as arrays: part ``c`` of ``op.chunks`` runs the phases' ``n - 1`` steps
    each, starting at global step ``c``; at a phase's step ``s`` position ``i`` sends the part of block
    ``block(i, s, n)`` to position ``i + 1``. A rank's sends in one step are in part order."""
    count = element_count(op, op.collective)
    phases = _RING_PHASES[op.collective]
    n, e = len(op.group), op.dtype_bytes
    part_steps = len(phases) * (n - 1)
    if part_steps == 0:
        return ()
    sizes = np.array([[hi - lo for lo, hi in part] for part in part_blocks(block_bounds(count, n), op.chunks)],
                     dtype=np.int64) * e  # [part, block]
    group = np.array(op.group, dtype=np.int64)
    position = np.arange(n)
    nxt = np.roll(group, -1)
    out = []
    for t in range(part_steps + op.chunks - 1):
        parts = range(max(0, t - part_steps + 1), min(t, op.chunks - 1) + 1)
        cols = []
        for c in parts:
            u = t - c
            block = phases[u // (n - 1)](position, u % (n - 1), n)
            cols.append(sizes[c, block])
        size = np.stack(cols, axis=1)  # [position, part]: a rank's sends in part order
        posted = size > 0
        if not posted.any():
            continue
        k = len(cols)
        out.append(SendStep(np.repeat(group, k)[posted.ravel()], np.repeat(nxt, k)[posted.ravel()],
                            size[posted], int(posted.sum(axis=1).max())))
    return tuple(out)
