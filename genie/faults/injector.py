"""Applying a `FaultPlan` during a run, on the orchestrator side, and recording what was done and when.

The session calls two hooks (the engine session's `FaultHooks`): ``timed_start(start_ns)`` when the run's
first timed barrier is released (zero of the run clock), and ``fault_point(k)`` while every rank waits at the barrier before timed op
k (the op's faults are applied before the ranks are released). Time-triggered faults and the ends of faults
with a duration (a flap's way back up, a degrade or cross-traffic that lasts `duration`) run on one timer
thread. Everything goes through a `LiveNetwork` (the testbed, or a fake in tests); one lock serialises it.

`close()` (always called, also on failure) stops the timer, then restores every link still degraded or down,
stops cross-traffic, and finishes the records: faults never reached are ``not_reached``.
Stragglers are applied by the ranks themselves (the engine's rank program, `compute_factor`); they are recorded here at their trigger.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from genie.core.protocol import Barrier
from genie.faults.model import FaultKind, FaultPlan, LinkTarget, PlannedFault


class FaultOutcome(Enum):
    APPLIED = "applied"  # applied (and, where it has an end, restored)
    NOT_REACHED = "not_reached"  # the run ended before its trigger
    FAILED = "failed"  # applying (or restoring) it failed: see detail


@dataclass(frozen=True)
class FaultRecord:
    """One row of faults.csv. Times are seconds on the run clock (0 = the first timed start); an op-triggered
    fault is applied while the ranks wait before that op."""

    index: int
    kind: FaultKind
    target: str
    params: str
    trigger: str
    applied_at_s: float | None
    restored_at_s: float | None
    outcome: FaultOutcome
    detail: str = ""


class LiveNetwork(Protocol):
    """What the injector does to a live testbed (`genie.faults.live.LiveTestbed`, or a fake)."""

    def degrade(self, target: LinkTarget, fault: PlannedFault) -> None: ...

    def restore_shape(self, target: LinkTarget) -> None: ...

    def set_link_up(self, target: LinkTarget, up: bool) -> None: ...

    def start_cross_traffic(self, src: str, dst: str) -> Any: ...

    def stop_cross_traffic(self, handle: Any) -> None: ...


class FaultInjector:
    def __init__(self, plan: FaultPlan, network: LiveNetwork | None, *,
                 clock_ns: Callable[[], int] = time.monotonic_ns, dilation: float = 1.0) -> None:
        self.plan, self.network, self.clock_ns = plan, network, clock_ns
        self.dilation = dilation  # a fault's times are the stated fabric's: N times longer in real time
        self.t0_ns: int | None = None
        self._lock = threading.RLock()
        self._cond = threading.Condition()
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._applied: dict[int, float] = {}
        self._restored: dict[int, float] = {}
        self._failed: dict[int, str] = {}
        self._active: dict[int, Callable[[], None]] = {}  # fault index -> how to undo it
        self._done_points: set[int] = set()

    # ---- hooks called by the session
    def timed_start(self, start_ns: int) -> None:
        if self.t0_ns is not None:
            return
        self.t0_ns = start_ns
        for fault in self.plan.timed():
            at_s = fault.fault.trigger.at_s or 0.0
            self._schedule(start_ns + round(at_s * 1e9 * self.dilation), lambda f=fault: self._apply(f))
        self._ensure_thread()

    def fault_point(self, op_index: int, reports: dict[int, Barrier] | None = None) -> None:
        if op_index in self._done_points:
            return
        self._done_points.add(op_index)
        for fault in self.plan.at_op(op_index):
            self._apply(fault)

    # ---- the run clock
    def now_s(self) -> float:
        origin = self.t0_ns if self.t0_ns is not None else self.clock_ns()
        return round((self.clock_ns() - origin) / 1e9 / self.dilation, 6)

    # ---- applying
    def _apply(self, planned: PlannedFault) -> None:
        fault = planned.fault
        with self._lock:
            if self._stop or planned.index in self._applied or planned.index in self._failed:
                return
            try:
                undo = self._do(planned)
            except Exception as exc:  # recorded; the run is failed at the end (close)
                self._failed[planned.index] = f"{type(exc).__name__}: {exc}"
                return
            self._applied[planned.index] = self.now_s()
            if undo is not None:
                self._active[planned.index] = undo
                if fault.duration_s is not None:
                    self._schedule(self.clock_ns() + round(fault.duration_s * 1e9 * self.dilation),
                                   lambda: self._restore(planned.index))

    def _do(self, planned: PlannedFault) -> Callable[[], None] | None:
        """Apply one fault; return how to undo it (None: nothing to undo on the orchestrator's side)."""
        kind, fault, net = planned.kind, planned.fault, self.network
        if kind is FaultKind.STRAGGLER:
            return None  # the rank stretches its own compute from the trigger on
        assert net is not None, "link and traffic faults need a live network"
        if kind is FaultKind.CROSS_TRAFFIC:
            assert fault.src is not None and fault.dst is not None
            handle = net.start_cross_traffic(fault.src, fault.dst)
            return lambda: net.stop_cross_traffic(handle)
        link = planned.link
        assert link is not None
        if kind is FaultKind.DEGRADE:
            net.degrade(link, planned)
            return lambda: net.restore_shape(link)
        net.set_link_up(link, False)  # DOWN, FLAP
        return lambda: net.set_link_up(link, True)

    def _restore(self, index: int) -> None:
        with self._lock:
            undo = self._active.pop(index, None)
            if undo is None:
                return
            try:
                undo()
            except Exception as exc:
                self._failed[index] = f"restoring failed: {type(exc).__name__}: {exc}"
                return
            self._restored[index] = self.now_s()

    # ---- the timer thread
    def _schedule(self, due_ns: int, action: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._queue, (due_ns, next(self._seq), action))
            self._cond.notify()
        self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._thread is None and not self._stop:
            self._thread = threading.Thread(target=self._loop, name="genie-faults", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (not self._queue or self._queue[0][0] > self.clock_ns()):
                    wait_s = (self._queue[0][0] - self.clock_ns()) / 1e9 if self._queue else None
                    self._cond.wait(timeout=wait_s)
                if self._stop:
                    return
                _, _, action = heapq.heappop(self._queue)
            action()

    # ---- the end
    def close(self) -> list[FaultRecord]:
        """Stop the timer, undo whatever is still applied, and return the records (in fault order)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30.0)
        for index in list(self._active):
            self._restore(index)
        return self.records()

    def records(self) -> list[FaultRecord]:
        rows = []
        for planned in self.plan.faults:
            fault, i = planned.fault, planned.index
            if i in self._failed:
                outcome, detail = FaultOutcome.FAILED, self._failed[i]
            elif i in self._applied:
                outcome, detail = FaultOutcome.APPLIED, ("applied by the rank" if planned.kind is
                                                         FaultKind.STRAGGLER else "")
            else:
                outcome, detail = FaultOutcome.NOT_REACHED, "the run ended before the trigger"
            rows.append(FaultRecord(i, fault.kind, planned.link.name if planned.link else fault.target,
                                    fault.params(), fault.trigger.describe(), self._applied.get(i),
                                    self._restored.get(i), outcome, detail))
        return rows

    def failures(self) -> list[str]:
        return [f"faults[{i}] ({self.plan.faults[i].fault.spec()}): {message}"
                for i, message in sorted(self._failed.items())]

