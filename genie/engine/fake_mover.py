"""A `StepMover` in virtual time, beside the protocol (`genie.engine.walker.StepMover`): each step completes a
configurable virtual duration after it began, on a `genie.engine.clock.FakeClock`. With it the real
`ProgramWalker` walks a program with no rank process, no socket and no sleeping, and the records' times are
exactly what the virtual clock says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from genie.core.schedule import Step
from genie.engine.clock import FakeClock
from genie.engine.walker import CommRun, Exchange

StepDuration = Callable[[CommRun, Step], "int | None"]  # virtual ns a step takes; None: it never completes
DEFAULT_POLL_NS = 1_000


@dataclass(frozen=True)
class BegunStep:
    """A step the walker began: node, index of the step within the node, virtual time."""

    node_id: int
    step_index: int
    at_ns: int


class FakeExchange:
    def __init__(self, clock: FakeClock, step: Step, done_ns: int | None) -> None:
        self.clock, self.step, self.done_ns = clock, step, done_ns

    def progress(self) -> bool:
        return self.done_ns is not None and self.clock.now_ns >= self.done_ns

    def describe_pending(self) -> str:
        parts = [f"sending to rank {s.peer} (0/{s.size_bytes} bytes)" for s in self.step.sends]
        parts += [f"receiving from rank {r.peer} (0/{r.size_bytes} bytes)" for r in self.step.recvs]
        return ", ".join(parts)


class FakeMover:
    """Completes every step ``step_ns`` after it began (an int, or a function of the run and step; None: never).
    `wait` sleeps on the clock until the earliest of a watched step's completion, ``wake_ns`` and ``wait_s``;
    when that is not in the future it lets ``poll_ns`` pass (a poll is never free, so a spinning walker moves
    on). ``begun`` lists every step begun, in order."""

    def __init__(self, clock: FakeClock, step_ns: int | StepDuration = 0, *, poll_ns: int = DEFAULT_POLL_NS) -> None:
        self.clock = clock
        self.step_ns = step_ns
        self.poll_ns = poll_ns
        self.watched: dict[int, CommRun] = {}
        self.begun: list[BegunStep] = []
        self.closed = False

    def begin(self, run: CommRun, step: Step) -> Exchange:
        duration = self.step_ns(run, step) if callable(self.step_ns) else self.step_ns
        now = self.clock.now_ns
        self.begun.append(BegunStep(run.node.id, run.index, now))
        return FakeExchange(self.clock, step, None if duration is None else now + duration)

    def watch(self, run: CommRun) -> None:
        self.watched[id(run)] = run

    def unwatch(self, run: CommRun) -> None:
        self.watched.pop(id(run), None)

    def wait(self, wait_s: float, wake_ns: int | None) -> list[CommRun]:
        now = self.clock.now_ns
        targets = [now + round(wait_s * 1e9)]
        if wake_ns is not None:
            targets.append(wake_ns)
        targets += [done for done in (self._done_ns(run) for run in self.watched.values()) if done is not None]
        target = min(targets)
        if target <= now:
            target = now + self.poll_ns
        self.clock.sleep_until(target, spin_ns=0)
        return [run for run in self.watched.values() if run.exchange is not None and run.exchange.progress()]

    def close(self) -> None:
        self.closed = True

    @staticmethod
    def _done_ns(run: CommRun) -> int | None:
        exchange = run.exchange
        return exchange.done_ns if isinstance(exchange, FakeExchange) else None
