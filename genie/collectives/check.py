"""Checks of schedules: structure, deadlock freedom under rendezvous semantics, and data correctness.

- `schedule_problems`: regions inside their buffers and element-aligned, peers in the group, and the model's
  rule that a step never reads a region it writes (only concurrent *reducing* receives may overlap).
- `find_deadlock`: message ``k`` on channel (src, dst) is src's ``k``-th send to dst and dst's ``k``-th receive
  from src (what stream sockets deliver); it completes when src is at the step holding that send and dst at
  the step holding that receive. A rank moves on when every transfer of its step completed.
- `initial_buffers` / `expected_regions` / `verify_buffers`: deterministic test data and the result the
  collective must produce; shared with the replay engine's ``--verify``. `simulate_data` runs a schedule
  in memory on that data.

Test data are small integers (a hash of rank and element index) in the op's element type (`element_dtype`:
1 byte uint8, 2 float16, 4 float32, 8 float64), bounded so that sums over the whole group are exact in
floating point (uint8 sums wrap around, which is just as deterministic).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import Buffer, CollectiveOp, Recv, Schedule, Send, Step
from genie.collectives.plan import alltoall_block_count, block_bounds, element_count

_ELEMENT_DTYPES = {1: np.dtype(np.uint8), 2: np.dtype(np.float16), 4: np.dtype(np.float32),
                   8: np.dtype(np.float64)}
_EXACT_INTEGERS = {2: 1 << 11, 4: 1 << 24, 8: 1 << 24}  # float16 / float32 integers are exact up to here
_MAX_LEVELS = 4096
_SUM_BATCH_ELEMENTS = 1 << 22
_MASK32 = 0xFFFFFFFF


@dataclass(frozen=True, eq=False)
class ExpectedRegion:
    """After the op, ``buffer[offset_bytes : offset_bytes + values.nbytes]`` must equal ``values``."""

    buffer: Buffer
    offset_bytes: int
    values: np.ndarray


# ---------------------------------------------------------------------------------------------- structure

def buffer_sizes(op: CollectiveOp) -> dict[Buffer, int]:
    """Bytes of each buffer a rank holds: DATA always, OUTPUT for all-to-all and the ring-shift send_recv; a
    barrier one element of each (its token out and in)."""
    if op.collective is Collective.BARRIER:
        return {Buffer.DATA: op.dtype_bytes, Buffer.OUTPUT: op.dtype_bytes}
    sizes = {Buffer.DATA: op.size_bytes}
    if op.collective is Collective.ALL_TO_ALL or _ring_shift(op):
        sizes[Buffer.OUTPUT] = op.size_bytes
    return sizes


def _ring_shift(op: CollectiveOp) -> bool:
    return op.collective is Collective.SEND_RECV and op.algorithm is Algorithm.RING


def schedule_problems(schedule: Schedule) -> list[str]:
    """Every structural error of ``schedule``; empty when it is well formed."""
    op = schedule.op
    problems: list[str] = []
    ids = [rs.rank for rs in schedule.ranks]
    if sorted(ids) != sorted(op.group):
        problems.append(f"schedule ranks {ids} differ from group {list(op.group)}")
    group = set(op.group)
    sizes = buffer_sizes(op)
    e = op.dtype_bytes

    def check_region(where: str, buffer: Buffer, offset: int, size: int) -> None:
        if buffer not in sizes:
            problems.append(f"{where}: buffer {buffer.value} does not exist for {op.collective.value}")
        elif offset < 0 or size <= 0 or offset + size > sizes[buffer]:
            problems.append(f"{where}: region [{offset}, {offset + size}) outside {buffer.value} "
                            f"buffer of {sizes[buffer]} bytes or empty")
        if offset % e or size % e:
            problems.append(f"{where}: offset {offset} / size {size} not multiples of dtype_bytes={e}")

    for rs in schedule.ranks:
        for index, step in enumerate(rs.steps):
            where = f"rank {rs.rank} step {index}"
            for t in (*step.sends, *step.recvs):
                kind = "send to" if isinstance(t, Send) else "recv from"
                if t.peer not in group or t.peer == rs.rank:
                    problems.append(f"{where}: {kind} invalid peer {t.peer}")
                check_region(f"{where} {kind} {t.peer}", t.buffer, t.offset_bytes, t.size_bytes)
            for c in step.copies:
                check_region(f"{where} copy source", c.src_buffer, c.src_offset_bytes, c.size_bytes)
                check_region(f"{where} copy target", c.dst_buffer, c.dst_offset_bytes, c.size_bytes)
            problems.extend(f"{where}: {p}" for p in _step_overlaps(step))
    return problems


def _step_overlaps(step: Step) -> list[str]:
    """Plain writes (non-reducing receives, copy targets) overlapping anything else in the same step. Reads
    may overlap reducing receives: reductions land in scratch memory and are summed in when the step ends."""
    if not step.recvs and not step.copies:
        return []
    spans = [(s.buffer, s.offset_bytes, s.offset_bytes + s.size_bytes, "read", f"send to {s.peer}")
             for s in step.sends]
    spans += [(c.src_buffer, c.src_offset_bytes, c.src_offset_bytes + c.size_bytes, "read", "copy source")
              for c in step.copies]
    spans += [(r.buffer, r.offset_bytes, r.offset_bytes + r.size_bytes, "reduce" if r.reduce else "write",
               f"recv from {r.peer}") for r in step.recvs]
    spans += [(c.dst_buffer, c.dst_offset_bytes, c.dst_offset_bytes + c.size_bytes, "write", "copy target")
              for c in step.copies]
    problems = []
    spans.sort(key=lambda s: (s[0].value, s[1]))
    active: list[tuple] = []
    for span in spans:
        active = [a for a in active if a[0] is span[0] and a[2] > span[1]]
        for a in active:
            kinds = {a[3], span[3]}
            if "write" in kinds:
                problems.append(f"{a[4]} [{a[1]}, {a[2]}) overlaps {span[4]} [{span[1]}, {span[2]}) "
                                f"in {span[0].value}")
        active.append(span)
    return problems


# ---------------------------------------------------------------------------------------------- execution

@dataclass(frozen=True)
class _Message:
    src: int
    src_step: int
    send: Send
    dst: int
    dst_step: int
    recv: Recv


def _pair_messages(schedule: Schedule) -> tuple[list[_Message], list[str]]:
    sends: dict[tuple[int, int], list[tuple[int, Send]]] = {}
    recvs: dict[tuple[int, int], list[tuple[int, Recv]]] = {}
    for rs in schedule.ranks:
        for index, step in enumerate(rs.steps):
            for s in step.sends:
                sends.setdefault((rs.rank, s.peer), []).append((index, s))
            for r in step.recvs:
                recvs.setdefault((r.peer, rs.rank), []).append((index, r))
    messages: list[_Message] = []
    problems: list[str] = []
    for channel in sorted(set(sends) | set(recvs)):
        src, dst = channel
        out, inc = sends.get(channel, []), recvs.get(channel, [])
        if len(out) != len(inc):
            problems.append(f"rank {src} sends {len(out)} messages to rank {dst}, which receives {len(inc)}")
        for k, ((si, s), (ri, r)) in enumerate(zip(out, inc)):
            if s.size_bytes != r.size_bytes:
                problems.append(f"message #{k} from rank {src} (step {si}, {s.size_bytes} B) to rank {dst} "
                                f"(step {ri}, {r.size_bytes} B): sizes differ")
            messages.append(_Message(src, si, s, dst, ri, r))
    return messages, problems


def _execute(schedule: Schedule, buffers: dict[int, dict[Buffer, np.ndarray]] | None) -> str | None:
    """Run ``schedule`` under rendezvous semantics (moving data when ``buffers`` is given); describe what
    stops it, or return None when every rank finished."""
    messages, problems = _pair_messages(schedule)
    if problems:
        return "; ".join(problems[:8]) + (f"; ... {len(problems) - 8} more" if len(problems) > 8 else "")
    steps = {rs.rank: rs.steps for rs in schedule.ranks}
    at: dict[tuple[int, int], list[int]] = {}
    for m_id, m in enumerate(messages):
        at.setdefault((m.src, m.src_step), []).append(m_id)
        at.setdefault((m.dst, m.dst_step), []).append(m_id)
    current = {rank: 0 for rank in steps}
    done = [False] * len(messages)
    landed: dict[int, np.ndarray] = {}
    e = schedule.op.dtype_bytes
    queue = deque(steps)
    while queue:
        rank = queue.popleft()
        while current[rank] < len(steps[rank]):
            index = current[rank]
            complete = True
            for m_id in at.get((rank, index), ()):
                if done[m_id]:
                    continue
                m = messages[m_id]
                other, other_step = (m.dst, m.dst_step) if m.src == rank else (m.src, m.src_step)
                if current.get(other) != other_step:
                    complete = False
                    continue
                done[m_id] = True
                queue.append(other)
                if buffers is not None:
                    s = m.send
                    landed[m_id] = _elements(buffers[m.src][s.buffer], s.offset_bytes, s.size_bytes, e).copy()
            if not complete:
                break
            if buffers is not None:
                _finish_step(steps[rank][index], [m_id for m_id in at.get((rank, index), ())
                                                  if messages[m_id].dst == rank], messages, landed,
                             buffers[rank], e)
            current[rank] = index + 1
    stuck = [rank for rank in steps if current[rank] < len(steps[rank])]
    if not stuck:
        return None
    lines = []
    for rank in stuck[:8]:
        index = current[rank]
        waits = []
        for m_id in at.get((rank, index), ()):
            if not done[m_id]:
                m = messages[m_id]
                other, other_step = (m.dst, m.dst_step) if m.src == rank else (m.src, m.src_step)
                verb = "send to" if m.src == rank else "recv from"
                state = (f"at step {current[other]}" if current[other] < len(steps[other]) else "finished")
                waits.append(f"{verb} rank {other} (its step {other_step}, it is {state})")
        lines.append(f"rank {rank} stuck at step {index}/{len(steps[rank])} waiting for " + ", ".join(waits))
    more = f"; ... {len(stuck) - 8} more stuck ranks" if len(stuck) > 8 else ""
    return "deadlock: " + "; ".join(lines) + more


def _elements(array: np.ndarray, offset_bytes: int, size_bytes: int, e: int) -> np.ndarray:
    return array[offset_bytes // e:(offset_bytes + size_bytes) // e]


def _finish_step(step: Step, incoming: list[int], messages: list[_Message], landed: dict[int, np.ndarray],
                 buffers: dict[Buffer, np.ndarray], e: int) -> None:
    copied = [(c, _elements(buffers[c.src_buffer], c.src_offset_bytes, c.size_bytes, e).copy())
              for c in step.copies]
    for m_id in incoming:
        r = messages[m_id].recv
        target = _elements(buffers[r.buffer], r.offset_bytes, r.size_bytes, e)
        if r.reduce:
            target += landed.pop(m_id)
        else:
            target[:] = landed.pop(m_id)
    for c, values in copied:
        _elements(buffers[c.dst_buffer], c.dst_offset_bytes, c.size_bytes, e)[:] = values


def find_deadlock(schedule: Schedule) -> str | None:
    """None when ``schedule`` runs to completion under rendezvous semantics; otherwise a description of the
    unmatched messages, size mismatches, or the stuck ranks and what each waits for."""
    return _execute(schedule, None)


def simulate_data(schedule: Schedule) -> dict[int, dict[Buffer, np.ndarray]]:
    """Every rank's buffers after running ``schedule`` in memory on `initial_buffers`.
    Raises ValueError when the schedule is malformed or deadlocks."""
    problems = schedule_problems(schedule)
    if problems:
        raise ValueError("malformed schedule: " + "; ".join(problems[:8]))
    buffers = {rs.rank: initial_buffers(schedule.op, rs.rank) for rs in schedule.ranks}
    problem = _execute(schedule, buffers)
    if problem:
        raise ValueError(problem)
    return buffers


# ---------------------------------------------------------------------------------------------- data

def element_dtype(op: CollectiveOp) -> np.dtype:
    """numpy element type used for ``op.dtype_bytes`` (1: uint8, 2: float16, 4: float32, 8: float64)."""
    try:
        return _ELEMENT_DTYPES[op.dtype_bytes]
    except KeyError:
        raise ValueError(f"no test data for dtype_bytes={op.dtype_bytes} (supported: 1, 2, 4, 8)") from None


def _levels(op: CollectiveOp) -> int:
    if op.dtype_bytes == 1:
        return 256
    return max(2, min(_MAX_LEVELS, _EXACT_INTEGERS[op.dtype_bytes] // len(op.group)))


def _seed(rank: int, buffer: Buffer) -> np.uint32:
    stream = 0 if buffer is Buffer.DATA else 1
    return np.uint32((rank * 0x85EBCA77 + stream * 0xC2B2AE3D + 0x27D4EB2F) & _MASK32)


def _hashed(op: CollectiveOp, index: np.ndarray, seed: np.ndarray | np.uint32) -> np.ndarray:
    """Test values of the elements ``index`` (uint32) of the buffers identified by ``seed`` (broadcast)."""
    x = index * np.uint32(0x9E3779B1) + seed
    for shift, factor in ((16, 0x7FEB352D), (15, 0x846CA68B)):
        x ^= x >> np.uint32(shift)
        x *= np.uint32(factor)
    x ^= x >> np.uint32(16)
    return (x % np.uint32(_levels(op))).astype(element_dtype(op))


def _indices(lo: int, hi: int) -> np.ndarray:
    return np.arange(lo, hi, dtype=np.uint64).astype(np.uint32)


def initial_values(op: CollectiveOp, rank: int, lo: int, hi: int, buffer: Buffer = Buffer.DATA) -> np.ndarray:
    """Elements ``[lo, hi)`` of ``rank``'s initial ``buffer``: a hash of rank, buffer and element index reduced
    to small integers, vectorised (no need to build the whole buffer to check one block)."""
    return _hashed(op, _indices(lo, hi), _seed(rank, buffer))


def initial_buffers(op: CollectiveOp, rank: int) -> dict[Buffer, np.ndarray]:
    """Deterministic start data of ``rank``: DATA (and OUTPUT for all-to-all), distinct per rank and element."""
    element_count(op)
    return {buffer: initial_values(op, rank, 0, size // op.dtype_bytes, buffer)
            for buffer, size in buffer_sizes(op).items()}


def _group_sum(op: CollectiveOp, lo: int, hi: int) -> np.ndarray:
    """Elementwise sum over the group of the DATA elements ``[lo, hi)``."""
    dtype = element_dtype(op)
    seeds = np.array([_seed(rank, Buffer.DATA) for rank in op.group], dtype=np.uint32)
    total = np.zeros(hi - lo, dtype=dtype)
    rows = max(1, _SUM_BATCH_ELEMENTS // max(1, hi - lo))  # ranks hashed at once, bounding memory
    index = _indices(lo, hi)
    for first in range(0, len(seeds), rows):
        total += _hashed(op, index[None, :], seeds[first:first + rows, None]).sum(axis=0, dtype=dtype)
    return total


def _gathered(op: CollectiveOp, lo: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Concatenation over the group of rank j's DATA elements ``[lo[j], lo[j] + sizes[j])``."""
    seeds = np.array([_seed(rank, Buffer.DATA) for rank in op.group], dtype=np.uint32)
    starts = np.cumsum(sizes) - sizes
    index = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(lo - starts, sizes)
    return _hashed(op, index.astype(np.uint32), np.repeat(seeds, sizes))


def expected_regions(op: CollectiveOp, rank: int) -> list[ExpectedRegion]:
    """The regions of ``rank``'s buffers the op defines, with their correct contents (other regions are
    unspecified, e.g. the blocks of a reduce-scatter that another rank owns)."""
    count = element_count(op)
    group = op.group
    n = len(group)
    pos = group.index(rank)
    e = op.dtype_bytes
    c = op.collective
    if c is Collective.ALL_REDUCE:
        regions = [ExpectedRegion(Buffer.DATA, 0, _group_sum(op, 0, count))]
    elif c is Collective.REDUCE_SCATTER:
        bounds = block_bounds(count, n)
        regions = [ExpectedRegion(Buffer.DATA, bounds[pos] * e, _group_sum(op, bounds[pos], bounds[pos + 1]))]
    elif c is Collective.ALL_GATHER:
        bounds = np.array(block_bounds(count, n), dtype=np.int64)
        regions = [ExpectedRegion(Buffer.DATA, 0, _gathered(op, bounds[:-1], np.diff(bounds)))]
    elif c is Collective.ALL_TO_ALL and op.split_bytes:  # all-to-allv: j's block for me, in j order
        m = np.array(op.split_bytes, dtype=np.int64) // e
        send_at = np.cumsum(m, axis=1) - m
        regions = [ExpectedRegion(Buffer.OUTPUT, 0, _gathered(op, send_at[:, pos], m[:, pos]))]
    elif c is Collective.ALL_TO_ALL:
        b = alltoall_block_count(count, n)
        regions = [ExpectedRegion(Buffer.OUTPUT, 0, _gathered(op, np.full(n, pos * b, dtype=np.int64),
                                                               np.full(n, b, dtype=np.int64)))]
    elif c is Collective.BROADCAST:
        regions = [ExpectedRegion(Buffer.DATA, 0, initial_values(op, op.root, 0, count))]
    elif c is Collective.REDUCE:
        regions = [ExpectedRegion(Buffer.DATA, 0, _group_sum(op, 0, count))] if rank == op.root else []
    elif c is Collective.GATHER:
        bounds = np.array(block_bounds(count, n), dtype=np.int64)
        regions = [ExpectedRegion(Buffer.DATA, 0, _gathered(op, bounds[:-1], np.diff(bounds)))] \
            if rank == op.root else []
    elif c is Collective.SCATTER:
        bounds = block_bounds(count, n)
        regions = [ExpectedRegion(Buffer.DATA, bounds[pos] * e,
                                  initial_values(op, op.root, bounds[pos], bounds[pos + 1]))]
    elif c is Collective.BARRIER:
        regions = []  # nothing but its synchronisation
    elif _ring_shift(op):
        regions = [ExpectedRegion(Buffer.OUTPUT, 0, initial_values(op, group[(pos - 1) % n], 0, count))]
    else:
        source = op.root if rank == op.peer else rank
        regions = [ExpectedRegion(Buffer.DATA, 0, initial_values(op, source, 0, count))]
    return [r for r in regions if r.values.size]


def verify_buffers(op: CollectiveOp, rank: int, buffers: dict[Buffer, np.ndarray]) -> str | None:
    """None when ``rank``'s ``buffers`` (element arrays or raw bytes) hold `expected_regions`; otherwise
    a one-line description of the first wrong element."""
    dtype = element_dtype(op)
    e = op.dtype_bytes
    for region in expected_regions(op, rank):
        array = np.asarray(buffers[region.buffer]).reshape(-1)
        if array.dtype != dtype:
            array = array.view(np.uint8).view(dtype)
        start = region.offset_bytes // e
        actual = array[start:start + region.values.size]
        if actual.size != region.values.size:
            return f"rank {rank}: {region.buffer.value} buffer too short ({array.size} elements)"
        wrong = np.flatnonzero(actual != region.values)
        if wrong.size:
            i = int(wrong[0])
            return (f"rank {rank}: {region.buffer.value} byte {(start + i) * e}: expected "
                    f"{region.values[i]}, got {actual[i]} ({wrong.size} wrong elements)")
    return None
