"""`ForkedCall`: a pure function of big in-memory data computed in a forked child while this process goes on.

The child gets the data by fork (copy on write, nothing pickled) and sends back only the function's value
(pickled, through a pipe). The value never depends on the child: if it gives none - it died, it raised, it was
wedged before it ran (in C, on a lock some other thread held when this process forked, as clean-clone CI once
saw a forked worker be) - :meth:`ForkedCall.result` computes the same pure function here. ``genie estimate``
checks a big trace this way beside the fabric model's compile (benchmarks/README.md, "The 1024-rank CLI's
parent"). The child is SIGKILLed by PID and reaped when the call is closed, whatever happened; it dies with
this process (PR_SET_PDEATHSIG) and ignores Ctrl-C (this process's to handle).
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import select
import signal
import time
from collections.abc import Callable
from typing import Any

from genie.core.process import die_with_parent

STARTED = b"S"  # the child's first byte: it got past the fork and runs Python
START_TIMEOUT_S = 10.0  # a child that has not started after this long is taken as wedged (computed here instead)


class ForkedCall:
    """``fn(arg)`` started in a forked child at construction; :meth:`result` its value (computed once)."""

    def __init__(self, fn: Callable[[Any], Any], arg: Any) -> None:
        self._fn, self._arg = fn, arg
        self._done = False
        self._value: Any = None
        self._pid: int | None = None
        self._read = -1
        read, write = os.pipe()
        try:
            pid = os.fork()
        except BaseException:  # (no child: the pipe is not kept)
            os.close(read)
            os.close(write)
            raise
        if pid == 0:  # the child: never returns
            _child(fn, arg, read, write)
        os.close(write)
        self._pid, self._read = pid, read

    def __enter__(self) -> "ForkedCall":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def result(self) -> Any:
        """The child's value of ``fn(arg)``, else ``fn(arg)`` computed here (its exception raised here)."""
        if not self._done:
            sent = self._receive()
            self.close()
            if sent is None:
                self._value = self._fn(self._arg)
            else:
                self._value = sent[0]
            self._done = True
        return self._value

    def close(self) -> None:
        """The child killed (if still running) and reaped; the pipe closed."""
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._pid, 0)
            self._pid = None
        if self._read >= 0:
            os.close(self._read)
            self._read = -1

    def _receive(self) -> tuple[Any] | None:
        """(value,) as the child sent it, or None if it sent none (or did not start in time)."""
        if self._read < 0:
            return None
        deadline = time.monotonic() + START_TIMEOUT_S
        chunks: list[bytes] = []
        while not chunks:  # its first byte, within the start-up timeout
            left = deadline - time.monotonic()
            if left <= 0 or not _readable(self._read, left):
                return None
            first = os.read(self._read, 1 << 16)
            if not first:
                return None
            chunks.append(first)
        while chunk := os.read(self._read, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
        if not data.startswith(STARTED) or len(data) == len(STARTED):
            return None
        try:
            ok, value = pickle.loads(data[len(STARTED):])
        except Exception:  # cut short (killed mid-send) or otherwise unreadable: computed here
            return None
        return (value,) if ok else None


def _readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` has data or its end (poll: select refuses descriptors at or above FD_SETSIZE, 1024)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(math.ceil(timeout_s * 1000)))  # (PEP 475: retried after a signal)


def _child(fn: Callable[[Any], Any], arg: Any, read: int, write: int) -> None:
    """In the forked child: send STARTED, then the pickled (True, fn(arg)) - or (False, None) if it raised."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent()
        os.close(read)
        os.write(write, STARTED)
        try:
            data = pickle.dumps((True, fn(arg)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:
            data = pickle.dumps((False, None))
        view = memoryview(data)
        while view:
            view = view[os.write(write, view):]
        code = 0
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the parent's buffered output
