"""Byte transport between ranks: persistent stream sockets, one per peer, driven by a poll loop.

`SocketTransport.exchange` runs one schedule step: every send and receive of the step progresses concurrently
on non-blocking sockets in a single thread (no per-byte Python work: the kernel copies straight from and into
preallocated memoryviews). A transfer without a view moves payload-agnostic bytes through a fixed window, so
a 256 MiB collective needs no 256 MiB buffer unless the data is verified.

The same class runs over TCP between namespaces (`connect_mesh`) and over `socket.socketpair()` inside one
process (`socketpair_mesh`), which is how schedules are executed in tests without root.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol, Sequence

from genie.core.errors import RunFailure

_RANK_HEADER = struct.Struct("!I")
_WATCH_IN = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET
_WATCH_IN_OUT = _WATCH_IN | select.EPOLLOUT
_EPOLL_IN = select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP | select.EPOLLRDHUP
_EPOLL_OUT = select.EPOLLOUT | select.EPOLLERR | select.EPOLLHUP


class PeerFailure(RunFailure):
    """A peer closed its connection, reset it, or did not keep up within the op timeout."""


@dataclass(slots=True)
class Transfer:
    """`size_bytes` to or from `peer`; `view` is where the bytes come from / land (None: content is irrelevant)."""

    peer: int
    size_bytes: int
    view: memoryview | None = None


class Transport(Protocol):
    rank: int

    def exchange(self, sends: Sequence[Transfer], recvs: Sequence[Transfer], timeout_s: float) -> None:
        """Run all sends and receives concurrently; return when all are complete."""

    def close(self) -> None: ...


class _Flow:
    """Progress of the transfers of one step in one direction with one peer, in order."""

    __slots__ = ("peer", "sock", "queue", "pos", "done_bytes", "total_bytes")

    def __init__(self, peer: int, sock: socket.socket) -> None:
        self.peer = peer
        self.sock = sock
        self.queue: deque[Transfer] = deque()
        self.pos = 0
        self.done_bytes = 0
        self.total_bytes = 0

    def add(self, t: Transfer) -> None:
        if t.size_bytes > 0:
            self.queue.append(t)
            self.total_bytes += t.size_bytes


class SocketTransport:
    def __init__(self, rank: int, sockets: dict[int, socket.socket], window_bytes: int = 1 << 20,
                 spin_s: float = 0.0) -> None:
        self.rank = rank
        self.spin_s = spin_s
        self._sockets = sockets
        for sock in sockets.values():
            sock.setblocking(False)
        self._fd_peer = {sock.fileno(): peer for peer, sock in sockets.items()}
        self._window = memoryview(bytearray(window_bytes))
        self._epoll = select.epoll()
        for fd in self._fd_peer:
            self._epoll.register(fd, _WATCH_IN)

    @property
    def peers(self) -> frozenset[int]:
        return frozenset(self._sockets)

    def _socket(self, peer: int) -> socket.socket:
        try:
            return self._sockets[peer]
        except KeyError:
            raise PeerFailure(f"rank {self.rank}: no connection to rank {peer}") from None

    def _pump_send(self, flow: _Flow) -> bool:
        """Send as much as the socket takes; True when the flow is complete."""
        queue = flow.queue
        send = flow.sock.send
        while queue:
            t = queue[0]
            remaining = t.size_bytes - flow.pos
            if t.view is not None:
                chunk = t.view[flow.pos:t.size_bytes]
            else:
                chunk = self._window[:min(remaining, len(self._window))]
            try:
                n = send(chunk)
            except BlockingIOError:
                return False
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise PeerFailure(f"rank {self.rank}: connection to rank {flow.peer} lost while sending "
                                  f"({exc.strerror or exc})") from None
            flow.pos += n
            flow.done_bytes += n
            if flow.pos >= t.size_bytes:
                queue.popleft()
                flow.pos = 0
        return True

    def _pump_recv(self, flow: _Flow) -> bool:
        queue = flow.queue
        recv_into = flow.sock.recv_into
        while queue:
            t = queue[0]
            remaining = t.size_bytes - flow.pos
            if t.view is not None:
                target = t.view[flow.pos:t.size_bytes]
            else:
                target = self._window[:min(remaining, len(self._window))]
            try:
                n = recv_into(target)
            except BlockingIOError:
                return False
            except ConnectionResetError:
                n = 0
            if n == 0:
                raise PeerFailure(f"rank {self.rank}: rank {flow.peer} closed the connection "
                                  f"({flow.done_bytes} of {flow.total_bytes} bytes received)")
            flow.pos += n
            flow.done_bytes += n
            if flow.pos >= t.size_bytes:
                queue.popleft()
                flow.pos = 0
        return True

    def exchange(self, sends: Sequence[Transfer], recvs: Sequence[Transfer], timeout_s: float) -> None:
        out: dict[int, _Flow] = {}
        inc: dict[int, _Flow] = {}
        for t in sends:
            flow = out.get(t.peer)
            if flow is None:
                flow = out[t.peer] = _Flow(t.peer, self._socket(t.peer))
            flow.add(t)
        for t in recvs:
            flow = inc.get(t.peer)
            if flow is None:
                flow = inc[t.peer] = _Flow(t.peer, self._socket(t.peer))
            flow.add(t)
        # Optimistic pass: small messages usually complete without touching poll.
        pending_out = {p: f for p, f in out.items() if not self._pump_send(f)}
        pending_in = {p: f for p, f in inc.items() if not self._pump_recv(f)}
        if not pending_out and not pending_in:
            return
        if self.spin_s > 0 and self._spin(pending_out, pending_in):
            return
        self._wait_loop(pending_out, pending_in, timeout_s)

    def _spin(self, pending_out: dict[int, _Flow], pending_in: dict[int, _Flow]) -> bool:
        """Retry for up to `spin_s`, yielding the CPU between tries: with more ranks than cores the peer we
        wait for gets the core at once, instead of this rank paying a sleep/wake-up per step."""
        until = time.perf_counter() + self.spin_s
        yield_cpu = os.sched_yield
        while time.perf_counter() < until:
            yield_cpu()
            for peer in [p for p, f in pending_out.items() if self._pump_send(f)]:
                del pending_out[peer]
            for peer in [p for p, f in pending_in.items() if self._pump_recv(f)]:
                del pending_in[peer]
            if not pending_out and not pending_in:
                return True
        return False

    def _wait_loop(self, pending_out: dict[int, _Flow], pending_in: dict[int, _Flow], timeout_s: float) -> None:
        """Wait for readiness with the edge-triggered epoll set registered once at start-up. Edge triggering
        is safe because every wait follows an attempt that hit EAGAIN on that socket (the optimistic pass,
        or a pump), so no readiness edge can have been missed. Write readiness is watched only while a send
        is blocked: otherwise every ACK would wake the rank."""
        watching_out = [self._sockets[peer].fileno() for peer in pending_out]
        for fd in watching_out:
            self._epoll.modify(fd, _WATCH_IN_OUT)
        try:
            self._wait(pending_out, pending_in, timeout_s)
        finally:
            for fd in watching_out:
                self._epoll.modify(fd, _WATCH_IN)

    def _wait(self, pending_out: dict[int, _Flow], pending_in: dict[int, _Flow], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        wait = self._epoll.poll
        fd_peer = self._fd_peer
        while pending_out or pending_in:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                raise PeerFailure(self._timeout_message(pending_out, pending_in, timeout_s))
            try:
                events = wait(remaining_s)
            except InterruptedError:
                continue
            for fd, ev in events:
                peer = fd_peer[fd]
                if ev & _EPOLL_IN and peer in pending_in and self._pump_recv(pending_in[peer]):
                    del pending_in[peer]
                if ev & _EPOLL_OUT and peer in pending_out and self._pump_send(pending_out[peer]):
                    del pending_out[peer]

    def _timeout_message(self, pending_out: dict[int, _Flow], pending_in: dict[int, _Flow], timeout_s: float) -> str:
        parts = [f"sending to rank {p} ({f.done_bytes}/{f.total_bytes} bytes)" for p, f in sorted(pending_out.items())]
        parts += [f"receiving from rank {p} ({f.done_bytes}/{f.total_bytes} bytes)"
                  for p, f in sorted(pending_in.items())]
        return f"rank {self.rank}: op timed out after {timeout_s:g} s " + ", ".join(parts)

    def close(self) -> None:
        self._epoll.close()
        for sock in self._sockets.values():
            try:
                sock.close()
            except OSError:
                pass
        self._sockets = {}


def _tune(sock: socket.socket, buffer_bytes: int | None) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if buffer_bytes:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)


def listen_socket(address: str, backlog: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, 0))
    sock.listen(max(backlog, 16))
    return sock


def connect_mesh(rank: int, listener: socket.socket, addresses: dict[int, tuple[str, int]],
                 peers: frozenset[int], timeout_s: float, buffer_bytes: int | None = None) -> dict[int, socket.socket]:
    """One TCP connection per peer: the lower rank connects, the higher accepts (peer sets are symmetric)."""
    deadline = time.monotonic() + timeout_s
    sockets: dict[int, socket.socket] = {}
    try:
        for peer in sorted(p for p in peers if p > rank):
            sockets[peer] = _connect(rank, peer, addresses[peer], deadline, buffer_bytes)
        expected = {p for p in peers if p < rank}
        listener.settimeout(1.0)
        while expected:
            if time.monotonic() > deadline:
                raise PeerFailure(f"rank {rank}: ranks {sorted(expected)} did not connect within {timeout_s:g} s")
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            header = _recv_header(conn)
            (peer,) = _RANK_HEADER.unpack(header)
            if peer not in expected:
                conn.close()
                raise PeerFailure(f"rank {rank}: unexpected connection claiming to be rank {peer}")
            _tune(conn, buffer_bytes)
            conn.settimeout(None)
            sockets[peer] = conn
            expected.discard(peer)
    except BaseException:
        for s in sockets.values():
            s.close()
        raise
    return sockets


def _recv_header(conn: socket.socket) -> bytes:
    data = b""
    while len(data) < _RANK_HEADER.size:
        chunk = conn.recv(_RANK_HEADER.size - len(data))
        if not chunk:
            raise PeerFailure("a peer closed its connection during setup")
        data += chunk
    return data


def _connect(rank: int, peer: int, address: tuple[str, int], deadline: float,
             buffer_bytes: int | None) -> socket.socket:
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _tune(sock, buffer_bytes)
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            sock.connect(address)
            sock.sendall(_RANK_HEADER.pack(rank))
            sock.settimeout(None)
            return sock
        except OSError as exc:
            sock.close()
            retriable = exc.errno in (errno.ECONNREFUSED, errno.EAGAIN, errno.ENETUNREACH, errno.EHOSTUNREACH)
            if time.monotonic() > deadline or not (retriable or isinstance(exc, socket.timeout)):
                raise PeerFailure(f"rank {rank}: cannot connect to rank {peer} at {address[0]}:{address[1]} "
                                  f"({exc.strerror or exc})") from None
            time.sleep(0.02)


def socketpair_mesh(world: int) -> list[dict[int, socket.socket]]:
    """A full mesh of AF_UNIX socket pairs for `world` ranks in one process (tests, in-process replay)."""
    mesh: list[dict[int, socket.socket]] = [{} for _ in range(world)]
    for a in range(world):
        for b in range(a + 1, world):
            sa, sb = socket.socketpair()
            mesh[a][b] = sa
            mesh[b][a] = sb
    return mesh
