"""Applying a plan: the `Backend` protocol, a `FakeBackend` that records calls and models what they make, and
the undo log.

`apply_plan` applies steps in order and keeps an undo log; when a step fails (or Ctrl-C / SIGTERM arrives) it
undoes every applied step in reverse and re-raises. Signals are deferred while a step is applied (a step is
never cut in half, and pyroute2 is never interrupted mid-request) and during the rollback. `undo_steps` is the same reverse walk for teardown: best effort, every step is attempted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from genie.core.errors import EnvironmentProblem, GenieError
from genie.testbed.kernel_model import KernelModel
from genie.testbed.lifecycle import signals_deferred
from genie.testbed.steps import USERSPACE_STEP_TYPES, PlanStep


class Backend(Protocol):
    def apply(self, step: PlanStep) -> None:
        """Make the step real, or raise leaving nothing of it behind (also when interrupted half-way)."""

    def undo(self, step: PlanStep) -> None:
        """Revert an applied step; must tolerate that its objects are already gone."""


class StepFailed(EnvironmentProblem):
    """A step could not be applied; everything applied before it has been rolled back."""


@dataclass
class FakeBackend:
    """Records ``("apply", step)`` / ``("undo", step)`` calls and makes them in ``kernel``, an in-memory model of
    what the steps build (`KernelModel`: a conflicting step fails like the kernel, leaving nothing). Fails
    applying the step at index ``fail_at`` (0-based, in call order) and undoing any step in ``fail_undo``.
    ``on_started(pid, netns)`` is told of every (fake) link emulator started."""

    fail_at: int | None = None
    fail_undo: frozenset[PlanStep] = frozenset()
    calls: list[tuple[str, PlanStep]] = field(default_factory=list)
    kernel: KernelModel = field(default_factory=KernelModel)
    on_started: Callable[[int, str], None] | None = None
    _applied_count: int = 0

    def apply(self, step: PlanStep) -> None:
        index = self._applied_count
        self._applied_count += 1
        if index == self.fail_at:
            raise OSError(f"fake failure applying step {index}")
        self.kernel.apply(step, self.on_started)
        self.calls.append(("apply", step))

    def undo(self, step: PlanStep) -> None:
        self.calls.append(("undo", step))
        if step in self.fail_undo:
            raise OSError("fake failure undoing")
        self.kernel.undo(step)

    @property
    def applied(self) -> list[PlanStep]:
        return [step for kind, step in self.calls if kind == "apply"]

    @property
    def undone(self) -> list[PlanStep]:
        return [step for kind, step in self.calls if kind == "undo"]


@dataclass
class TestbedBackend:
    """Netlink steps to ``netlink``, the userspace shaper's steps (queue rules, emulators) to ``userspace``."""

    __test__ = False  # not a pytest test class

    netlink: Backend
    userspace: Backend

    def _for(self, step: PlanStep) -> Backend:
        return self.userspace if isinstance(step, USERSPACE_STEP_TYPES) else self.netlink

    def apply(self, step: PlanStep) -> None:
        self._for(step).apply(step)

    def undo(self, step: PlanStep) -> None:
        self._for(step).undo(step)


def apply_plan(backend: Backend, steps: Sequence[PlanStep], *,
               before_step: Callable[[int], None] | None = None,
               check_interrupt: Callable[[], None] | None = None,
               rollback_failures: list[tuple[PlanStep, Exception]] | None = None) -> None:
    """Apply `steps` in order. ``before_step(k)`` runs before step k (0-based) is applied, so a write-ahead log
    can record that steps [0, k] may exist; ``check_interrupt()`` runs before every step and after the last
    one (see `SignalGuard.check`). On any failure or interrupt: undo the applied steps in reverse, then raise
    (StepFailed for an error of the backend, the original exception otherwise). The steps the rollback could not
    undo are added to `rollback_failures`."""
    applied: list[PlanStep] = []
    try:
        for index, step in enumerate(steps):
            if check_interrupt is not None:
                check_interrupt()
            if before_step is not None:
                before_step(index)
            with signals_deferred():  # a step is never cut in half: a signal is raised once it is logged
                try:
                    backend.apply(step)
                except GenieError:
                    raise
                except Exception as exc:  # netlink, OS errors: located by step
                    raise StepFailed(f"step {index + 1} ({step.describe()}) failed: {_reason(exc)}; "
                                     f"rolled back the {len(applied)} steps applied before it") from exc
                applied.append(step)
        if check_interrupt is not None:
            check_interrupt()
    except BaseException:
        with signals_deferred():
            failures = undo_steps(backend, applied)
        if rollback_failures is not None:
            rollback_failures.extend(failures)
        raise


def undo_steps(backend: Backend, steps: Sequence[PlanStep]) -> list[tuple[PlanStep, Exception]]:
    """Undo `steps` in reverse order, attempting every one; returns the failures (step, error)."""
    failures: list[tuple[PlanStep, Exception]] = []
    for step in reversed(steps):
        try:
            backend.undo(step)
        except Exception as exc:  # keep going: the rest must still be undone
            failures.append((step, exc))
    return failures


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0] if text else type(exc).__name__
