"""Which local rank went first, when several die at once.

When a rank dies without a word, hydra's proxy sees its pipes close and kills every other rank at once; the
error must name the one that died first. A pidfd says when a rank's whole process has gone, which can be after
the ranks the proxy killed because of it have gone too (measured: the proxy's kill came 6.5 ms after the
SIGKILL, while the killed rank had not yet finished exiting; on a loaded machine its last thread may be off the
CPU for longer than another rank takes to die — clean-clone CI named the wrong rank so, 2026-12-05).

So each rank also holds, from its start, a connection to a unix socket of the session (`hold_watch`), on a
file descriptor above every one it inherits. A dying process's files are released highest descriptor first (the
kernel queues each release as task work and runs the queue newest first), so that connection closes before the pipes
and the PMI socket the proxy watches: the first rank whose connection closes died first, and every rank the
proxy killed for it closes its connection later. That release order is the kernel's since Linux 5.5 (task work
runs newest first; before, oldest first, and no kernel promises either): tests/test_mpi_watch.py checks it on
the kernel it runs on. The pidfd stays as the fallback (a rank that could not connect) and ranks on other
machines are not watched (`boot_id` differs).
"""

from __future__ import annotations

import fcntl
import os
import resource
import selectors
import socket
from dataclasses import dataclass, field
from pathlib import Path

_LISTEN_BACKLOG = 1024
_HIGH_SLOT = 1023  # the watch connection's descriptor, or the highest the file limit allows


@dataclass
class _Connection:
    sock: socket.socket
    rank: int | None = None
    pending: bytes = b""


@dataclass(frozen=True)
class _Listener:
    pass


@dataclass(frozen=True)
class _Pidfd:
    rank: int


@dataclass
class RankWatch:
    """The session's side: a listening socket at `path` and the pidfds of the local ranks, all registered in
    `selector` with this watch's own key data (`owns` tells the session's loop which keys are the watch's).
    `on_ready` returns the ranks a ready key says are going, in the order the kernel saw it."""

    selector: selectors.BaseSelector
    path: Path
    _listener: socket.socket | None = None
    _pidfds: dict[int, int] = field(default_factory=dict)  # fd -> rank

    def __post_init__(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
            sock.listen(_LISTEN_BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()  # no watch socket (a path too long, a read-only directory): the pidfds still tell
            return
        self._listener = sock
        self.selector.register(sock, selectors.EVENT_READ, _Listener())

    @property
    def listening(self) -> bool:
        return self._listener is not None

    @staticmethod
    def owns(key: selectors.SelectorKey) -> bool:
        return isinstance(key.data, (_Listener, _Connection, _Pidfd))

    def watch_pids(self, ranks_by_pid: dict[int, int]) -> None:
        """A pidfd per local rank (pid -> rank): says a rank has gone if its connection did not."""
        for pid, rank in ranks_by_pid.items():
            try:
                fd = os.pidfd_open(pid)
            except (OSError, AttributeError):
                continue
            self._pidfds[fd] = rank
            self.selector.register(fd, selectors.EVENT_READ, _Pidfd(rank))

    def on_ready(self, key: selectors.SelectorKey) -> list[int]:
        data = key.data
        if isinstance(data, _Listener):
            self._accept()
            return []
        if isinstance(data, _Pidfd):
            self.selector.unregister(key.fileobj)
            return [data.rank]
        return self._read(data)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):  # none left, or gone already
                return
            except OSError:  # no descriptor to take it (EMFILE, ENFILE), no memory: it would stay ready for ever
                self._stop_listening()  # and spin the session's loop; the pidfds still tell
                return
            conn.setblocking(False)
            self.selector.register(conn, selectors.EVENT_READ, _Connection(conn))

    def _read(self, conn: _Connection) -> list[int]:
        """Everything the connection holds, to its end if it has ended: a rank line and the close behind it are
        one event, so a rank whose line was still unread when it died is not reported after later closes."""
        for _ in range(8):  # a rank writes one short line; a stray writer does not hold the loop
            try:
                data = conn.sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return []
            except OSError:
                data = b""
            if not data:
                break
            if b"\n" not in conn.pending:  # the first line names the rank; nothing after it is kept
                conn.pending = (conn.pending + data)[:64]
                if b"\n" in conn.pending:
                    line = conn.pending.split(b"\n", 1)[0]
                    conn.rank = int(line) if line.strip().isdigit() else None
        else:
            return []
        self.selector.unregister(conn.sock)
        conn.sock.close()
        return [] if conn.rank is None else [conn.rank]

    def close(self) -> None:
        for key in list(self.selector.get_map().values()):
            if self.owns(key):
                self.selector.unregister(key.fileobj)
                if isinstance(key.data, _Connection):
                    key.data.sock.close()
        for fd in self._pidfds:
            os.close(fd)
        self._pidfds.clear()
        self._stop_listening()

    def _stop_listening(self) -> None:
        if self._listener is not None:
            if self._listener.fileno() in self.selector.get_map():
                self.selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
            try:
                self.path.unlink()
            except OSError:
                pass


def hold_watch(path: str, rank: int) -> int | None:
    """The rank's side: connect to the session's watch socket, say which rank this is, and keep the connection
    for the life of the process on a descriptor above every inherited one (`_HIGH_SLOT`; close-on-exec, never
    closed). None when there is no socket to reach (another machine, or a session without one)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        sock.sendall(f"{rank}\n".encode())
    except OSError:
        sock.close()
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(soft, _HIGH_SLOT + 1) - 1  # above the inherited pipes and PMI socket the proxy watches
    if target <= sock.fileno():
        return sock.detach()
    try:
        high = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, target)
    except OSError:
        return sock.detach()
    sock.close()
    return high
