"""Execute one rank's schedule on a transport, optionally with real data (``verify``), stamping each step."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from genie.core.errors import RunFailure
from genie.core.schedule import Buffer, RankSchedule, Step
from genie.engine.transport import SocketTransport, Transfer, Transport

if TYPE_CHECKING:  # numpy is imported by the buffers of a verified run only: a rank without costs ~12 MB less
    import numpy as np


@dataclass(frozen=True)
class StepRecord:
    step_index: int
    start_ns: int
    end_ns: int
    sent_bytes: int
    received_bytes: int
    peers: tuple[int, ...]


class DataBuffers:
    """Real buffers for ``--verify``: float32 arrays per Buffer plus a reusable scratch area for reductions."""

    def __init__(self, arrays: dict[Buffer, np.ndarray]) -> None:
        import numpy as np

        self.arrays = {b: np.ascontiguousarray(a) for b, a in arrays.items()}
        self.dtype = next(iter(self.arrays.values())).dtype
        self.bytes = {b: memoryview(a.view(np.uint8).reshape(-1)) for b, a in self.arrays.items()}
        self._scratch = np.empty(0, dtype=np.uint8)

    def scratch(self, size_bytes: int) -> np.ndarray:
        import numpy as np

        if self._scratch.size < size_bytes:
            self._scratch = np.empty(size_bytes, dtype=np.uint8)
        return self._scratch

    def region(self, buffer: Buffer, offset_bytes: int, size_bytes: int) -> np.ndarray:
        raw = self.arrays[buffer].view("uint8").reshape(-1)
        return raw[offset_bytes:offset_bytes + size_bytes]


TransferPlan = tuple[tuple[list[Transfer], list[Transfer]], ...]


def transfer_plan(schedule: RankSchedule) -> TransferPlan:
    """Each step's sends and receives as the transport takes them, for runs without data: built once per
    schedule (`run_bench_job`) instead of once per step and iteration. The transports only read them."""
    return tuple(([Transfer(s.peer, s.size_bytes) for s in step.sends],
                  [Transfer(r.peer, r.size_bytes) for r in step.recvs]) for step in schedule.steps)


def run_schedule(schedule: RankSchedule, transport: Transport, *, timeout_s: float,
                 data: DataBuffers | None = None, record_steps: bool = False,
                 clock=time.monotonic_ns, clear_to_send: Step | None = None,
                 plan: TransferPlan | None = None) -> list[StepRecord]:
    """Run every step of `schedule`; raise RunFailure (naming rank and peer) when a peer fails or times out.

    A step starts once the previous step's receives are complete — its data dependency — while the previous
    sends may still be in progress (queued per peer, in order): each link stays busy across step boundaries,
    like NCCL's pipelined slices, instead of idling while the slowest flow of the step ends. With real data,
    a step whose writes overlap a region still being sent first waits for the sends. The op ends when every
    send and receive is complete. A step record ends when the step's receives are complete.

    `clear_to_send` (`genie.engine.program.clear_to_send`) runs first: tokens only, never data, not recorded.
    `plan`: `transfer_plan(schedule)`, when the caller keeps one (runs without data)."""
    records: list[StepRecord] = []
    deadline = time.monotonic() + timeout_s
    if clear_to_send is not None:
        transport.exchange([Transfer(s.peer, s.size_bytes) for s in clear_to_send.sends],
                           [Transfer(r.peer, r.size_bytes) for r in clear_to_send.recvs], timeout_s,
                           wait_for_sends=False)
    if data is None:
        return _run_plan(schedule, plan or transfer_plan(schedule), transport, timeout_s, deadline,
                         record_steps, clock, compiled=plan is not None)
    sending: list[tuple[Buffer, int, int]] = []  # regions of sends not yet waited for (real data only)
    for index, step in enumerate(schedule.steps):
        start_ns = clock() if record_steps else 0
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            raise RunFailure(f"rank {schedule.rank}: op timed out after {timeout_s:g} s at step {index}")
        if sending and _overwrites(step, sending):
            transport.flush(remaining_s)
            sending.clear()
        _run_data_step(step, transport, data, remaining_s)
        sending.extend((s.buffer, s.offset_bytes, s.offset_bytes + s.size_bytes) for s in step.sends)
        if record_steps:
            records.append(_record(index, step, start_ns, clock()))
    _flush(schedule, transport, timeout_s, deadline)
    return records


def run_timed_ops(schedule: RankSchedule, transport: Transport, plan: TransferPlan, ops: int, *,
                  timeout_s: float) -> list[tuple[int, int]] | None:
    """`ops` payload-agnostic ops of `schedule` back to back, as `ops` calls of `run_schedule(schedule, transport,
    timeout_s=timeout_s, plan=plan)` run them, each timed from before its first step to after its flush on
    time.monotonic_ns()'s clock: [(start ns, end ns)] per op. The ops run in the compiled step loop with no
    Python between them (`CompiledSteps.run_ops`); an op the loop stops in is finished by the reference from
    the step it stopped at, as `run_plan` hands it over. A one-step plan with several peers (the all-to-all)
    runs its ops in the compiled exchange instead (`SocketTransport.exchange_ops`). None where neither can run
    these ops (the caller runs them one by one): not a `SocketTransport`, not built, a plan of neither shape."""
    if not isinstance(transport, SocketTransport):
        return None
    steps = transport.whole_ops(plan)
    if steps is None:  # a one-step multi-peer plan (the all-to-all's): the compiled exchange's op loop, or None
        return transport.exchange_ops(plan, ops, timeout_s)
    spans: list[tuple[int, int]] = []
    while len(spans) < ops:
        done, outcome, index, done_bytes, error, deadline, start_ns = steps.run_ops(ops - len(spans), timeout_s)
        spans.extend(done)
        if len(spans) == ops:
            break
        index = transport.resume_plan(steps, plan, (outcome, index, done_bytes, error), deadline, timeout_s)
        _run_plan(schedule, plan, transport, timeout_s, deadline, False, time.monotonic_ns, compiled=True,
                  start=index)
        spans.append((start_ns, time.monotonic_ns()))
    return spans


def _run_plan(schedule: RankSchedule, plan: TransferPlan, transport: Transport, timeout_s: float, deadline: float,
              record_steps: bool, clock, *, compiled: bool = False, start: int = 0) -> list[StepRecord]:
    """`run_schedule` without data: the same step semantics, with the least work per step. With `compiled` (a
    plan the caller keeps), a `SocketTransport` runs what steps it can in its compiled step loop
    (`SocketTransport.run_plan`, stamping them on CLOCK_MONOTONIC: only where `clock` is that clock); the steps
    it leaves run here, through `exchange`."""
    records: list[StepRecord] = []
    exchange = transport.exchange
    monotonic = time.monotonic
    run_compiled = None
    if compiled and isinstance(transport, SocketTransport) and (not record_steps or clock is time.monotonic_ns):
        run_compiled = transport.run_plan
    stamps: list[tuple[int, int, int]] | None = [] if record_steps else None
    index, count = start, len(plan)
    while index < count:
        if run_compiled is not None:
            index = run_compiled(plan, index, deadline, timeout_s, stamps)
            if stamps:
                records.extend(_record(i, schedule.steps[i], start_ns, end_ns) for i, start_ns, end_ns in stamps)
                stamps.clear()
            if index >= count:
                break
        sends, recvs = plan[index]
        start_ns = clock() if record_steps else 0
        remaining_s = deadline - monotonic()
        if remaining_s <= 0:
            raise RunFailure(f"rank {schedule.rank}: op timed out after {timeout_s:g} s at step {index}")
        exchange(sends, recvs, remaining_s, wait_for_sends=False)
        if record_steps:
            records.append(_record(index, schedule.steps[index], start_ns, clock()))
        index += 1
    _flush(schedule, transport, timeout_s, deadline)
    return records


def _record(index: int, step: Step, start_ns: int, end_ns: int) -> StepRecord:
    return StepRecord(index, start_ns, end_ns, step.sent_bytes, step.received_bytes,
                      tuple(sorted({t.peer for t in (*step.sends, *step.recvs)})))


def _flush(schedule: RankSchedule, transport: Transport, timeout_s: float, deadline: float) -> None:
    """The op ends when every queued send is out, within the op's deadline."""
    remaining_s = deadline - time.monotonic()
    if remaining_s <= 0:
        raise RunFailure(f"rank {schedule.rank}: op timed out after {timeout_s:g} s")
    transport.flush(remaining_s)


def _overwrites(step, sending: list[tuple[Buffer, int, int]]) -> bool:
    """Does `step` write (copy into, receive into, reduce into) a region a queued send still reads?"""
    writes = [(c.dst_buffer, c.dst_offset_bytes, c.dst_offset_bytes + c.size_bytes) for c in step.copies]
    writes += [(r.buffer, r.offset_bytes, r.offset_bytes + r.size_bytes) for r in step.recvs]
    return _overlap(writes, sending)


def _overlap(a: list[tuple[Buffer, int, int]], b: list[tuple[Buffer, int, int]]) -> bool:
    return any(xb == yb and x0 < y1 and y0 < x1 for xb, x0, x1 in a for yb, y0, y1 in b)


def _run_data_step(step, transport: Transport, data: DataBuffers, timeout_s: float) -> None:
    for c in step.copies:
        data.region(c.dst_buffer, c.dst_offset_bytes, c.size_bytes)[:] = \
            data.region(c.src_buffer, c.src_offset_bytes, c.size_bytes)
    sends = [Transfer(s.peer, s.size_bytes, data.bytes[s.buffer][s.offset_bytes:s.offset_bytes + s.size_bytes])
             for s in step.sends]
    reduce_total = sum(r.size_bytes for r in step.recvs if r.reduce)
    scratch = data.scratch(reduce_total)
    recvs: list[Transfer] = []
    reductions: list[tuple[np.ndarray, np.ndarray]] = []
    scratch_offset = 0
    for r in step.recvs:
        if r.reduce:
            landing = scratch[scratch_offset:scratch_offset + r.size_bytes]
            scratch_offset += r.size_bytes
            reductions.append((data.region(r.buffer, r.offset_bytes, r.size_bytes), landing))
            recvs.append(Transfer(r.peer, r.size_bytes, memoryview(landing)))
        else:
            recvs.append(Transfer(r.peer, r.size_bytes,
                                  data.bytes[r.buffer][r.offset_bytes:r.offset_bytes + r.size_bytes]))
    # a reduction lands after the receives: it must not change what this step is still sending
    own = [(s.buffer, s.offset_bytes, s.offset_bytes + s.size_bytes) for s in step.sends]
    reduced = [(r.buffer, r.offset_bytes, r.offset_bytes + r.size_bytes) for r in step.recvs if r.reduce]
    transport.exchange(sends, recvs, timeout_s, wait_for_sends=_overlap(reduced, own))
    for target, landing in reductions:
        t = target.view(data.dtype)
        t += landing.view(data.dtype)
