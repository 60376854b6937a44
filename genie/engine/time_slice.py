"""A rank's CPU time slice (issue #36 item 2; docs/engine.md, "A rank's time slice").

A rank spends almost all of a small op asleep in a blocking `recv` and then needs the CPU for ~20 us (a step's
send and the next receive). Linux's fair scheduler (EEVDF, 6.6 and later) gives every task a slice, 0.75 ms
scaled by the CPU count by default, and picks by virtual deadline = eligible time + slice: a woken rank with
the default slice waits behind whatever else the CPU runs for up to that long. Since 6.12 a task may ask for
its own slice (`sched_setattr`'s `sched_runtime` for a fair policy, 0.1-100 ms, no privilege needed); a short
one gives it an earlier deadline on waking, so it runs sooner and is preempted sooner — the kernel's own
interface for a latency-sensitive task that needs little CPU each time. Each rank asks for the shortest slice
as it starts; its policy and nice value stay as they were. Kernels without custom slices accept the call and
ignore it; where the system call is missing or refused nothing changes.

No effect at import: the system calls are made by `request_time_slice` only.
"""

from __future__ import annotations

import ctypes
import platform
import struct

#: the shortest slice the kernel accepts for a fair task (it clamps `sched_runtime` to 0.1-100 ms)
RANK_SLICE_US = 100

# sched_getattr / sched_setattr by architecture (no libc wrapper before glibc 2.41)
_SYSCALLS = {"x86_64": (315, 314), "aarch64": (275, 274)}
# struct sched_attr, SCHED_ATTR_SIZE_VER0: size, policy, flags, nice, priority, runtime, deadline, period (ns)
_ATTR = struct.Struct("=IIQiIQQQ")
# the fair policies (SCHED_NORMAL, SCHED_BATCH, SCHED_IDLE): the only ones a slice means anything for
_FAIR_POLICIES = (0, 3, 5)
_RESET_ON_FORK = 0x01  # SCHED_FLAG_RESET_ON_FORK, kept as it was


def request_time_slice(slice_us: int = RANK_SLICE_US) -> bool:
    """Ask the kernel for a fair-scheduler slice of `slice_us` for this process, keeping its policy and nice
    value. True when the kernel took the call; False when it is not available here (another architecture,
    no such system call, a real-time or deadline policy, or refused), which changes nothing."""
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        return False
    get_attr, set_attr = numbers
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    attr = ctypes.create_string_buffer(_ATTR.size)
    if libc.syscall(get_attr, 0, attr, _ATTR.size, 0) != 0:
        return False
    _size, policy, flags, nice, priority, _runtime, _deadline, _period = _ATTR.unpack(attr.raw)
    if policy not in _FAIR_POLICIES:
        return False
    attr = ctypes.create_string_buffer(_ATTR.pack(_ATTR.size, policy, flags & _RESET_ON_FORK, nice, priority,
                                                  slice_us * 1000, 0, 0), _ATTR.size)
    return libc.syscall(set_attr, 0, attr, 0) == 0

