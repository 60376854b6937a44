"""Precise waiting for the rank program: a CLOCK_MONOTONIC timerfd (nanosecond deadlines inside an epoll set;
Python 3.11 has no os.timerfd) and a 1 ns timer slack so the kernel does not defer wake-ups by 50 us.

`Clock` is what the walker (`genie.engine.walker.ProgramWalker`) reads and waits on: `MONOTONIC` is the real
one (CLOCK_MONOTONIC), `FakeClock` beside it keeps virtual time that moves only when it is waited on (and wakes
``late_ns`` late from every sleep, as a loaded machine does), so walker semantics are tested without sleeping.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass
from typing import Protocol

CLOCK_MONOTONIC = 1
TFD_NONBLOCK = 0o4000
TFD_CLOEXEC = 0o2000000
TFD_TIMER_ABSTIME = 1
PR_SET_TIMERSLACK = 29

DEFAULT_SPIN_NS = 200_000
_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def minimise_timer_slack() -> None:
    _libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)


class DeadlineTimer:
    """A timerfd that becomes readable at an absolute time.monotonic_ns() deadline."""

    def __init__(self) -> None:
        fd = _libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self.fd = fd

    def set(self, deadline_ns: int | None) -> None:
        """Arm for `deadline_ns` (monotonic), or disarm with None."""
        spec = _Itimerspec()
        if deadline_ns is not None:
            deadline_ns = max(deadline_ns, 1)
            spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if _libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def clear(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)


def spin_until(deadline_ns: int) -> None:
    """Busy-wait the last stretch. No sched_yield: on a loaded machine a yield can hand a whole time slice
    (milliseconds) to another rank and stretch the node far past its deadline."""
    now = time.monotonic_ns
    while now() < deadline_ns:
        pass


def sleep_until(deadline_ns: int, spin_ns: int = DEFAULT_SPIN_NS) -> None:
    """Sleep until shortly before `deadline_ns` (monotonic), then spin the rest."""
    remaining = deadline_ns - spin_ns - time.monotonic_ns()
    if remaining > 0:
        time.sleep(remaining / 1e9)
    spin_until(deadline_ns)


class Clock(Protocol):
    """Monotonic time in ns and the waits on it."""

    def monotonic_ns(self) -> int: ...

    def spin_until(self, deadline_ns: int) -> None:
        """Busy-wait until `deadline_ns`: returns at once after it, never before."""

    def sleep_until(self, deadline_ns: int, spin_ns: int = DEFAULT_SPIN_NS) -> None:
        """Sleep until `spin_ns` before `deadline_ns` (a sleep may wake late), then spin the rest."""


class MonotonicClock:
    """CLOCK_MONOTONIC (``time.monotonic_ns``) with the module's waits."""

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def spin_until(self, deadline_ns: int) -> None:
        spin_until(deadline_ns)

    def sleep_until(self, deadline_ns: int, spin_ns: int = DEFAULT_SPIN_NS) -> None:
        sleep_until(deadline_ns, spin_ns)


MONOTONIC = MonotonicClock()


@dataclass
class FakeClock:
    """Virtual monotonic time: reading it costs nothing, waiting on it moves it. A spin ends exactly at its
    deadline; a sleep wakes ``late_ns`` after the time it was meant to end (a loaded machine's late wake-up).
    A fake mover's blocking waits are sleeps too (`genie.engine.fake_mover.FakeMover`)."""

    now_ns: int = 0
    late_ns: int = 0
    read_ns: int = 0  # each read moves time this much (an interpreter's cost per step of the walk)

    def monotonic_ns(self) -> int:
        now = self.now_ns
        self.now_ns += self.read_ns
        return now

    def spin_until(self, deadline_ns: int) -> None:
        self.now_ns = max(self.now_ns, deadline_ns)

    def sleep_until(self, deadline_ns: int, spin_ns: int = DEFAULT_SPIN_NS) -> None:
        wake_ns = deadline_ns - spin_ns
        if wake_ns > self.now_ns:
            self.now_ns = wake_ns + self.late_ns
        self.spin_until(deadline_ns)

    def advance(self, ns: int) -> None:
        """Let `ns` of virtual time pass (work done between two reads)."""
        self.now_ns += ns
