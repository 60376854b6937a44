"""The OS hooks in core: `die_with_parent`, for a child between fork and exec (``preexec_fn``),
`own_status_field`, a field of this process's /proc status (read by the engine and the testbed), and
`first_line`, a child's ready line within a deadline (the link emulator's, the cross-traffic receiver's, a
probe server's).

It asks the kernel (prctl PR_SET_PDEATHSIG) to SIGKILL the child when its parent dies, so no process genie
starts outlives it. This module starts no process and has no effect at import: it is here, below every
package that starts children (engine, report's capture, faults' cross-traffic), so none of them imports
another for it.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import time

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def own_status_field(key: str) -> str | None:
    """The first word of field `key` (e.g. ``VmHWM``, ``CapEff``) of /proc/self/status; None when absent or
    unreadable."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return line.split()[1]
    except OSError:
        pass
    return None


def first_line(proc: subprocess.Popen, timeout_s: float) -> bytes:  # type: ignore[type-arg]
    """The first line `proc` writes to its stdout pipe (what came with it in the same read is dropped: read
    from the pipe's descriptor, no buffer keeps it); b"" if it closes the pipe first (it ended). TimeoutError
    after `timeout_s`: a child wedged before it is ready never holds its caller."""
    assert proc.stdout is not None
    fd, data = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError(f"no line within {timeout_s:g} s")
        chunk = os.read(fd, 256)
        if not chunk:
            return b""
        data += chunk
    return data[:data.index(b"\n") + 1]
