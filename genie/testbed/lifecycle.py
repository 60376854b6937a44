"""Signals and processes around critical sections: SIGTERM as an exception, deferred signals during rollback,
and ending processes by PID (never by name).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import FrameType

_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived inside `signals_raise()`. A KeyboardInterrupt, so that generic ``except
    Exception`` blocks do not swallow it and the CLI reports "interrupted" (exit 130)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"terminated by {signal.Signals(signum).name}")


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _is_forked_child(owner_pid: int) -> bool:
    """True in a process forked after the handler was installed: pyroute2 forks helpers to enter namespaces,
    and they inherit our handlers. There a signal must never raise into (and so run) the parent's code."""
    return os.getpid() != owner_pid


class SignalGuard:
    """The signals received inside `signals_raise()`. Python runs handlers wherever the interpreter is, and an
    exception raised inside e.g. an at-fork hook or a ``__del__`` is printed and dropped; `check()` at safe
    points re-raises such a lost signal."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.lost: int | None = None  # a signal whose exception Python dropped, not raised since (signals_raise)

    def check(self) -> None:
        if self.received:
            self.lost = None  # raised here: not sent again
            raise _interruption(self.received[0])


def _interruption(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _send_again(guard: SignalGuard, main_ident: int, hook) -> None:
    """Send ``guard.lost`` to the main thread (a blocking call there returns early to handle it) once it runs no
    frame of ``hook`` (checked every 10 ms), unless it was raised in the meantime (``check()``, another signal)."""
    while True:
        time.sleep(0.01)
        frame = sys._current_frames().get(main_ident)
        while frame is not None and frame.f_code is not hook:
            frame = frame.f_back
        if frame is None:
            signum, guard.lost = guard.lost, None
            if signum is not None:
                signal.pthread_kill(main_ident, signum)
            return


@contextmanager
def signals_raise() -> Iterator[SignalGuard]:
    """Inside the block SIGTERM/SIGHUP raise `Terminated` and SIGINT raises KeyboardInterrupt, so a critical
    section can roll back in ``except``/``finally``; call the yielded guard's `check()` between steps. In a
    process forked inside the block the signals end that process instead. Outside the main thread signals
    cannot be handled: the guard then never fires."""
    guard = SignalGuard()
    if not _in_main_thread():
        yield guard
        return
    owner_pid = os.getpid()

    def raise_interrupt(signum: int, _frame: FrameType | None) -> None:
        if _is_forked_child(owner_pid):
            os._exit(128 + signum)  # what the default action would do
        guard.received.append(signum)
        guard.lost = None  # raised again (if dropped again, redeliver says so)
        raise _interruption(signum)

    def redeliver(unraisable) -> None:
        """An interruption raised where Python drops exceptions (an at-fork hook - logging's runs at every fork -,
        a ``__del__``) would be lost, and the command would run on to its end: a thread sends the signal again
        once the main thread has left this hook (handled in here, it would be dropped too), and again if the
        main thread drops it again."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and guard.received and \
                not _is_forked_child(owner_pid):
            guard.lost = guard.received[-1]
            threading.Thread(target=_send_again, args=(guard, threading.main_thread().ident, redeliver.__code__),
                             daemon=True).start()
            return
        dropped(unraisable)

    previous = {sig: signal.signal(sig, raise_interrupt) for sig in _HANDLED}
    dropped, sys.unraisablehook = sys.unraisablehook, redeliver
    try:
        yield guard
    finally:
        sys.unraisablehook = dropped
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Inside the block SIGINT/SIGTERM/SIGHUP are only recorded; the first one is raised when the block ends
    (KeyboardInterrupt or `Terminated`), unless an exception is already propagating. For steps, rollbacks and
    teardowns that must run to the end. Processes forked inside the block ignore these signals. No-op outside
    the main thread."""
    if not _in_main_thread():
        yield
        return
    received: list[int] = []
    owner_pid = os.getpid()

    def record(signum: int, _frame: FrameType | None) -> None:
        if _is_forked_child(owner_pid):
            return  # a helper forked inside the block finishes its short job; the parent handles the signal
        received.append(signum)

    previous = {sig: signal.signal(sig, record) for sig in _HANDLED}
    completed = False
    try:
        yield
        completed = True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if completed and received:
        raise _interruption(received[0])


def _stat(pid: int) -> tuple[bytes, int] | None:
    """(state, start ticks) of process `pid` from /proc/PID/stat (fields 3 and 22), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[19])


def process_start_ticks(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot, /proc/PID/stat field 22), None if it is gone.
    A (pid, start) pair names one process even after its PID is reused."""
    found = _stat(pid)
    return None if found is None else found[1]


def process_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie. Zombies are left for their parent to reap (it may be a
    Popen of the caller that wants the exit status)."""
    found = _stat(pid)
    return found is not None and found[0] not in (b"Z", b"X")


def same_process(pid: int, start_ticks: int | None) -> bool:
    """Is `pid` still the process that started at `start_ticks`, and running (a killed process its parent has
    not reaped yet is a zombie: it holds nothing any more)? False for an unknown start time."""
    found = _stat(pid)
    return start_ticks is not None and found is not None and found[1] == start_ticks and found[0] not in (b"Z", b"X")


def terminate_pids(pids: Iterable[int], *, grace_s: float = 1.0) -> list[int]:
    """SIGTERM each PID, wait up to `grace_s` for them to exit, SIGKILL the rest. Never signals this process.
    Returns the PIDs that were signalled. Callers pass only PIDs of processes genie started or found inside its
    own namespaces. Each PID's start time is taken here and checked again before every signal: a process that
    ended during the grace period and whose PID the kernel gave to another is never signalled."""
    me = os.getpid()
    targets = {pid: process_start_ticks(pid) for pid in sorted(set(pids)) if pid > 1 and pid != me}
    signalled = [pid for pid, start in targets.items() if _signal(pid, start, signal.SIGTERM)]
    deadline = time.monotonic() + grace_s
    alive = list(signalled)
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [pid for pid in alive if process_alive(pid)]
    for pid in alive:
        _signal(pid, targets[pid], signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [pid for pid in alive if process_alive(pid)]
    return signalled


def _signal(pid: int, start: int | None, sig: int) -> bool:
    """Send `sig` to `pid` if it is still the process that started at `start`."""
    if start is None or process_start_ticks(pid) != start:
        return False
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
