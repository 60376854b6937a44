"""The OS hooks in core: `die_with_parent`, for a child between fork and exec (``preexec_fn``), and
`own_status_field`, a field of this process's /proc status (read by the engine and the testbed).

It asks the kernel (prctl PR_SET_PDEATHSIG) to SIGKILL the child when its parent dies, so no process genie
starts outlives it. This module starts no process and has no effect at import: it is here, below every
package that starts children (engine, report's capture, faults' cross-traffic), so none of them imports
another for it.
"""

from __future__ import annotations

import ctypes
import signal

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
