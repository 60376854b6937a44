"""Byte transport between ranks: persistent stream sockets, a send and a receive connection per peer (`PeerLink`),
driven by a poll loop.

`SocketTransport.exchange` runs one schedule step: every send and receive of the step progresses concurrently
on non-blocking sockets in a single thread (no per-byte Python work: the kernel copies straight from and into
preallocated memoryviews). A transfer without a view moves payload-agnostic bytes through a fixed window, so
a 256 MiB collective needs no 256 MiB buffer unless the data is verified; TCP discards such received bytes
without copying them (`genie.engine.flows.DISCARD`).

The same class runs over TCP between namespaces (`connect_mesh`) and over `socket.socketpair()` inside one
process (`socketpair_mesh`), which is how schedules are executed in tests without root.
"""

from __future__ import annotations

import errno
import functools
import os
import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from genie.core.flowpath import FlowTuple
from genie.engine.compiled_exchange import CompiledExchange, ExchangeLoop
from genie.engine.compiled_steps import CompiledPlans, StepPlan, run_steps
from genie.engine.flows import DISCARD, Flow as _Flow, PeerFailure, StepExchange, Transfer
from genie.engine.flows import closed_failure, send_failure, wait_sent
from genie.engine.flows import pump_recv as _pump_recv, pump_send as _pump_send

_LINK_HEADER = struct.Struct("!II")  # (rank, channel) sent by the connecting side
_DONTWAIT = socket.MSG_DONTWAIT  # sockets stay in blocking mode; every non-blocking attempt says so per call
WATCH_IN = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET
WATCH_IN_OUT = WATCH_IN | select.EPOLLOUT
_RECV_SLICE_S = 0.05  # a blocking recv returns at least this often to check the deadline
_RECV_SLICE = struct.pack("ll", 0, round(_RECV_SLICE_S * 1e6))
HELD_BACK_MIN_BYTES = 64 << 10  # a message up to one GSO packet leaves its socket whole (see `flush`)


@dataclass(frozen=True, slots=True)
class PeerLink:
    """This rank's connections with one peer on one channel: `send` carries this rank's bytes to the peer, `recv`
    the peer's bytes to this rank — a TCP connection per direction, as NCCL gives each peer a send and a receive
    connection. So a connection carries data one way and only pure ACKs the other. That matters on a shaped
    link: its ACK lane (`genie.testbed.shaping`) lets pure ACKs overtake queued data, and on a connection with
    data both ways the data would then arrive carrying ACK numbers older than ones already received; Linux
    discards such segments, data and all, when the gap exceeds the window (RFC 5961's ACK check), and the
    sender retransmits. One socket may serve both directions (`duplex`: a socket pair inside one process)."""

    send: socket.socket
    recv: socket.socket

    @classmethod
    def duplex(cls, sock: socket.socket) -> PeerLink:
        return cls(sock, sock)

    def sockets(self) -> tuple[socket.socket, ...]:
        return (self.send,) if self.send is self.recv else (self.send, self.recv)

    def close(self) -> None:
        for sock in self.sockets():
            try:
                sock.close()
            except OSError:
                pass


class Transport(Protocol):
    rank: int

    def exchange(self, sends: Sequence[Transfer], recvs: Sequence[Transfer], timeout_s: float, *,
                 wait_for_sends: bool = True) -> None:
        """Run all sends and receives concurrently; return when all are complete. With `wait_for_sends=False`
        return once the receives are complete: sends still in progress stay queued (in order, per peer) and
        keep moving during later exchanges, as a GPU's NCCL keeps forwarding slices while it receives the next.
        A transport may always wait (that is only less eager)."""

    def flush(self, timeout_s: float) -> None:
        """Return when every queued send is complete."""

    def close(self) -> None: ...


class SocketTransport:
    """Executes steps one at a time over a `PeerLink` per peer (the bench path). Sends not waited for
    (`wait_for_sends=False`) stay in the outbox and move whenever the transport runs."""

    def __init__(self, rank: int, links: dict[int, PeerLink], window_bytes: int = 1 << 20,
                 spin_s: float = 0.0, compiled: bool = True) -> None:
        self.rank = rank
        self.spin_s = spin_s
        self._links = links
        self._fd_peer: dict[int, int] = {}
        for peer, link in links.items():
            for sock in link.sockets():
                sock.settimeout(None)  # blocking mode: see _recv_blocking; attempts elsewhere use MSG_DONTWAIT
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _RECV_SLICE)
                self._fd_peer[sock.fileno()] = peer
        self._window = memoryview(bytearray(window_bytes))
        self._window_bytes = window_bytes
        self._send = {peer: link.send.send for peer, link in links.items()}  # the fast path's, per peer
        self._recv_into = {peer: link.recv.recv_into for peer, link in links.items()}
        # receive connections in delayed-ACK mode, set again after each small receive (see `delay_acks`)
        self._delay_acks = {peer: delay_acks(link.recv) for peer, link in links.items()}
        self._outbox: dict[int, _Flow] = {}
        self._bulk_peers: set[int] = set()  # peers sent more than HELD_BACK_MIN_BYTES since the last flush
        # the compiled step loop's plans; `compiled=False`: every step on the Python reference (tests compare)
        self._compiled_plans = CompiledPlans(self._window, links, self._delay_acks, HELD_BACK_MIN_BYTES) if compiled else None
        self._epoll = select.epoll()
        for fd in self._fd_peer:
            self._epoll.register(fd, WATCH_IN)
        # multi-peer steps (the all-to-all's) in the compiled exchange loop, the same system calls as below
        self._compiled_exchange = CompiledExchange(rank, self._window, links, self._epoll, HELD_BACK_MIN_BYTES) \
            if compiled and ExchangeLoop is not None else None

    @property
    def peers(self) -> frozenset[int]:
        return frozenset(self._links)

    def exchange(self, sends: Sequence[Transfer], recvs: Sequence[Transfer], timeout_s: float, *,
                 wait_for_sends: bool = True) -> None:
        for t in sends:
            if t.size_bytes > HELD_BACK_MIN_BYTES:
                self._bulk_peers.add(t.peer)
        if not self._outbox and len(sends) <= 1 and len(recvs) == 1:
            # the latency-critical shape (recursive doubling, trees, p2p): at most one send, then one message
            # to wait for — no step object, no failed attempt, no epoll: a send and a recv that sleeps
            if not sends or self._send_now(sends[0]):
                self._recv_now(recvs[0], timeout_s)
                return
            sends = ()  # the rest of that send waits in the outbox
        if self._compiled_exchange is not None and not self.spin_s \
                and self._compiled_exchange.exchange(self._outbox, sends, recvs, timeout_s, wait_for_sends):
            return
        step = StepExchange(self.rank, self._links, sends, recvs, self._window, outbox=self._outbox,
                            wait_for_sends=wait_for_sends)
        if step.progress():  # optimistic pass: small messages usually complete here
            return
        if not step.pending_out and len(step.pending_in) == 1:
            (flow,) = step.pending_in.values()
            self._recv_blocking(flow, timeout_s)
            return
        if self.spin_s > 0 and self._spin(step):
            return
        self._wait_loop(step, timeout_s)

    def flush(self, timeout_s: float) -> None:
        """Return when every send is out of the outbox and, if the sends went to several peers in bulk, TCP
        has sent all of them, so no later op's data can overtake them: TCP small queues holds a message's last
        piece in its socket until its connection's packets before it have left the host's FIFO, while later
        data to another peer enters the FIFO at once (docs/engine.md, "An op's last pieces"). A NIC serves its
        connections' queues in turn: its last piece is never held back behind later data."""
        if self._outbox:
            self.exchange((), (), timeout_s)
        if self._bulk_peers:
            peers, self._bulk_peers = self._bulk_peers, set()
            if len(peers) > 1:
                wait_sent(self.rank, {p: self._links[p].send for p in peers}, timeout_s)

    def run_plan(self, plan: StepPlan, start: int, deadline: float, timeout_s: float,
                 stamps: list[tuple[int, int, int]] | None = None) -> int:
        """Run `plan` (a `transfer_plan` the caller keeps) from step `start` in the compiled step loop (outbox
        empty; `genie.engine.compiled_steps`); returns the first step the caller runs through `exchange`."""
        if self._outbox or self._compiled_plans is None:
            return start
        return self._compiled_plans.run(self, plan, start, deadline, timeout_s, stamps, self._bulk_peers)

    def whole_ops(self, plan: StepPlan):
        """`plan` compiled for whole ops back to back (`CompiledSteps.run_ops`; None: not here — not built, not
        its shape, sends in bulk, or a send still queued)."""
        if self._outbox or self._bulk_peers or self._compiled_plans is None:
            return None
        return self._compiled_plans.whole_ops(plan)

    def exchange_ops(self, plan: StepPlan, ops: int, timeout_s: float) -> list[tuple[int, int]] | None:
        """`ops` whole ops of a one-step multi-peer `plan` (the all-to-all's) back to back in the compiled exchange
        (`CompiledExchange.run_ops`): their (start ns, end ns). None: not here (not built, not its shape, a send
        queued, spinning), the caller runs them one by one."""
        if self._compiled_exchange is None or self.spin_s or self._outbox or self._bulk_peers or len(plan) != 1:
            return None
        sends, recvs = plan[0]
        if len(sends) <= 1 and len(recvs) == 1:  # `exchange`'s lone-receive shape
            return None
        return self._compiled_exchange.run_ops(self._outbox, sends, recvs, ops, timeout_s)

    def resume_plan(self, steps, plan: StepPlan, stopped: tuple[int, int, int, int], deadline: float,
                    timeout_s: float) -> int:
        """An op of `plan` that `steps.run_ops` stopped with `stopped` (outcome, step, done bytes, errno): the
        reference takes that step over, as `run_plan` hands it; returns the first step the caller runs."""
        return run_steps(self, steps, plan, stopped[1], deadline, timeout_s, first=stopped)

    def _link(self, peer: int) -> PeerLink:
        try:
            return self._links[peer]
        except KeyError:
            raise PeerFailure(f"rank {self.rank}: no connection to rank {peer}") from None

    def _send_now(self, transfer: Transfer) -> bool:
        """Send as much of `transfer` as the socket takes now; True when all of it went, else the rest is
        queued in the outbox. A payload-agnostic transfer that fits the window is one system call and no
        flow object (the per-step cost of small collectives, benchmarks/README.md "The step's software")."""
        size = transfer.size_bytes
        sent = 0
        if transfer.view is None and size <= self._window_bytes:
            send = self._send.get(transfer.peer)
            if send is None:
                self._link(transfer.peer)  # raises, naming the peer
            try:
                sent = send(self._window[:size], _DONTWAIT) if size else 0
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise send_failure(self.rank, transfer.peer, exc) from None
            if sent == size:
                return True
        return self.queue_send(transfer, sent)

    def queue_send(self, transfer: Transfer, sent_bytes: int) -> bool:
        """`transfer` of which `sent_bytes` went: push the rest now; True when all of it went, else the rest is
        queued in the outbox."""
        flow = _Flow(transfer.peer, self._link(transfer.peer).send)
        flow.add(transfer)
        flow.pos = flow.done_bytes = sent_bytes
        if _pump_send(flow, self._window, self.rank):
            return True
        self._outbox[transfer.peer] = flow
        return False

    def _recv_now(self, transfer: Transfer, timeout_s: float) -> None:
        """Receive `transfer` blocking (see `_recv_blocking`). A payload-agnostic transfer that fits the window
        is received with bare `recv_into` calls, no flow object, and reads the clock only when a slice of
        the socket's SO_RCVTIMEO ends without data."""
        size = transfer.size_bytes
        if transfer.view is not None or size > self._window_bytes:
            flow = _Flow(transfer.peer, self._link(transfer.peer).recv)
            flow.add(transfer)
            self._recv_blocking(flow, timeout_s)
            return
        self.finish_recv(transfer, 0, timeout_s)

    def finish_recv(self, transfer: Transfer, got: int, timeout_s: float, deadline: float | None = None, *,
                    slice_ended: bool = False) -> None:
        """Receive the rest (`got` bytes are in) of payload-agnostic `transfer` within the window with bare
        `recv_into` calls (`DISCARD`: TCP drops the bytes uncopied), then set delayed-ACK mode again. Whenever a
        slice ends empty (`slice_ended`: one just did) the op's `deadline` is checked (None: `timeout_s` after the
        receive began)."""
        size = transfer.size_bytes
        recv_into = self._recv_into.get(transfer.peer)
        if recv_into is None:
            self._link(transfer.peer)  # raises, naming the peer
        window = self._window
        while got < size:
            if slice_ended:  # is the op's time up?
                slice_ended = False
                now = time.monotonic()
                if deadline is None:  # the first slice ended: the receive began about a slice ago
                    deadline = now - _RECV_SLICE_S + timeout_s
                if now >= deadline:
                    raise PeerFailure(f"rank {self.rank}: op timed out after {timeout_s:g} s receiving from "
                                      f"rank {transfer.peer} ({got}/{size} bytes)")
            try:
                n = recv_into(window[:size - got], 0, DISCARD)
            except (BlockingIOError, InterruptedError):  # a slice ended
                slice_ended = True
                continue
            except ConnectionResetError:
                n = 0
            if n == 0:
                raise closed_failure(self.rank, transfer.peer, got, size)
            got += n
        again = self._delay_acks[transfer.peer]
        if again is not None:
            try:
                again()
            except OSError:  # the connection is gone: the next receive names the peer
                pass

    def _recv_blocking(self, flow: _Flow, timeout_s: float) -> None:
        """Receive `flow` with blocking recv calls, each bounded by the socket's SO_RCVTIMEO slice (set once):
        one system call that sleeps, instead of an attempt that fails, an epoll_wait and a second attempt.
        The op's deadline is checked whenever a slice ends, so a silent peer is named within the slice."""
        deadline = time.monotonic() + timeout_s
        while not _pump_recv(flow, self._window, self.rank, 0):
            if time.monotonic() >= deadline:
                raise PeerFailure(f"rank {self.rank}: op timed out after {timeout_s:g} s receiving from rank "
                                  f"{flow.peer} ({flow.done_bytes}/{flow.total_bytes} bytes)")

    def _spin(self, step: StepExchange) -> bool:
        """Retry for up to `spin_s`, yielding the CPU between tries: with more ranks than cores the peer we
        wait for gets the core at once, instead of this rank paying a sleep/wake-up per step."""
        until = time.perf_counter() + self.spin_s
        yield_cpu = os.sched_yield
        while time.perf_counter() < until:
            yield_cpu()
            if step.progress():
                return True
        return False

    def _wait_loop(self, step: StepExchange, timeout_s: float) -> None:
        """Wait for readiness with the edge-triggered epoll set registered once at start-up. Edge triggering
        is safe because every wait follows an attempt that hit EAGAIN on that socket (the optimistic pass,
        or a pump), so no readiness edge can have been missed. Write readiness is watched only while a send
        is blocked: otherwise every ACK would wake the rank."""
        watching_out = [self._links[peer].send.fileno() for peer in step.pending_out]
        for fd in watching_out:
            self._epoll.modify(fd, WATCH_IN_OUT)
        try:
            deadline = time.monotonic() + timeout_s
            wait = self._epoll.poll
            fd_peer = self._fd_peer
            while True:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    raise PeerFailure(f"rank {self.rank}: op timed out after {timeout_s:g} s "
                                      + step.describe_pending())
                try:
                    events = wait(remaining_s)
                except InterruptedError:
                    continue
                for fd, ev in events:
                    if step.on_ready(fd_peer[fd], ev):
                        return
        finally:
            for fd in watching_out:
                self._epoll.modify(fd, WATCH_IN)

    def close(self) -> None:
        self._compiled_plans = self._compiled_exchange = None  # their sockets are closed next
        self._epoll.close()
        for link in self._links.values():
            link.close()
        self._links = {}


# Linux's default congestion control, pinned so results do not depend on the machine's default (this CI
# machine defaults to bbr, whose bandwidth probing and 200 ms PROBE_RTT cwnd cuts cost 1-3% of a 1 Gbit/s ring
# and stretch single steps; measured 0.1154-0.1176 GB/s with bbr vs 0.1179-0.1188 with cubic, 64 MiB ring
# all-reduce, 8 hosts). Where the kernel refuses (algorithm missing, or not in the allowed list for a
# non-root rank), the socket keeps the namespace's default.
CONGESTION_CONTROL = b"cubic"


def delay_acks(sock: socket.socket) -> Callable[[], None] | None:
    """Put a connection that only receives data in delayed-ACK ("pingpong") mode, as Linux does by itself for
    a connection with data both ways (TCP_QUICKACK=0). Otherwise each read that empties the socket of a segment
    smaller than the connection's MSS estimate sends a pure ACK at once (`tcp_cleanup_rbuf`): one packet more
    per small message through the links, where a connection per peer let the reply's data carry it. In the
    mode the kernel still ACKs every second such segment (measured: 0.49 ACKs per 8 B message instead of
    0.92, benchmarks/README.md "The step's software"). Linux leaves the mode whenever a delayed ACK's timer
    fires (a rank that did not read for 40 ms: an idle connection, or a busy host), so the caller sets it
    again: the returned call does (None: not a TCP socket, left alone)."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
        return None
    again = functools.partial(sock.setsockopt, socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
    try:
        again()
    except OSError:
        return None
    return again


def _tune(sock: socket.socket, buffer_bytes: int | None) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, CONGESTION_CONTROL)
        except OSError:
            pass
    if buffer_bytes:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)


def listen_socket(address: str) -> socket.socket:
    """A rank's listener. Every rank connects to its peers before it accepts theirs (`connect_mesh`), so the
    backlog is the system's largest: it holds each peer's connections (a channel's worth per peer) until they
    are accepted, where a full one would drop SYNs and stall a peer's connect for a second each."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, 0))
    sock.listen(socket.SOMAXCONN)
    return sock


def connect_mesh(rank: int, listener: socket.socket, addresses: dict[int, tuple[str, int]],
                 links: frozenset[tuple[int, int]], timeout_s: float,
                 buffer_bytes: int | None = None) -> dict[tuple[int, int], PeerLink]:
    """A `PeerLink` per (channel, peer) link: this rank connects its send connection to each peer and accepts
    each peer's (link sets are symmetric). A channel is a communicator: ops of different channels may be in
    flight at once, each on its own connections, as NCCL gives each communicator its own. Connecting comes
    first: `listener`'s backlog (`listen_socket`) holds the peers' connections until they are accepted.
    Returns {(channel, peer): PeerLink}."""
    deadline = time.monotonic() + timeout_s
    sends: dict[tuple[int, int], socket.socket] = {}
    recvs: dict[tuple[int, int], socket.socket] = {}
    expected = set(links)
    try:
        for channel, peer in sorted(links):
            sends[(channel, peer)] = _connect(rank, channel, peer, addresses[peer], deadline, buffer_bytes)
        listener.settimeout(1.0)
        while expected:
            if time.monotonic() > deadline:
                missing = sorted({peer for _, peer in expected})
                raise PeerFailure(f"rank {rank}: ranks {missing} did not connect within {timeout_s:g} s")
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            peer, channel = _LINK_HEADER.unpack(_recv_header(conn))
            if (channel, peer) not in expected:
                conn.close()
                raise PeerFailure(f"rank {rank}: unexpected connection from rank {peer} (channel {channel})")
            _tune(conn, buffer_bytes)
            conn.settimeout(None)
            recvs[(channel, peer)] = conn
            expected.discard((channel, peer))
    except BaseException:
        for s in (*sends.values(), *recvs.values()):
            s.close()
        raise
    return {link: PeerLink(sends[link], recvs[link]) for link in sorted(links)}


def _recv_header(conn: socket.socket) -> bytes:
    data = b""
    while len(data) < _LINK_HEADER.size:
        chunk = conn.recv(_LINK_HEADER.size - len(data))
        if not chunk:
            raise PeerFailure("a peer closed its connection during setup")
        data += chunk
    return data


def _connect(rank: int, channel: int, peer: int, address: tuple[str, int], deadline: float,
             buffer_bytes: int | None) -> socket.socket:
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _tune(sock, buffer_bytes)
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            sock.connect(address)
            sock.sendall(_LINK_HEADER.pack(rank, channel))
            sock.settimeout(None)
            return sock
        except OSError as exc:
            sock.close()
            retriable = exc.errno in (errno.ECONNREFUSED, errno.EAGAIN, errno.ENETUNREACH, errno.EHOSTUNREACH)
            if time.monotonic() > deadline or not (retriable or isinstance(exc, socket.timeout)):
                raise PeerFailure(f"rank {rank}: cannot connect to rank {peer} at {address[0]}:{address[1]} "
                                  f"({exc.strerror or exc})") from None
            time.sleep(0.02)


def flow_tuples(rank: int, links: dict[tuple[int, int], PeerLink]) -> tuple[FlowTuple, ...]:
    """The 5-tuple of each TCP connection this rank sends on in `links` ({(channel, peer): PeerLink}), in the
    direction it sends: what the kernel's ECMP hash chose its path by (:mod:`genie.core.flowpath`)."""
    out = []
    for (channel, peer), link in sorted(links.items()):
        sock = link.send
        if sock.family != socket.AF_INET or sock.fileno() < 0:
            continue
        try:
            (src_ip, src_port), (dst_ip, dst_port) = sock.getsockname(), sock.getpeername()
        except OSError:  # already reset by the peer: its path is lost, not the run
            continue
        out.append(FlowTuple(rank, peer, src_ip, src_port, dst_ip, dst_port, channel))
    return tuple(out)


def socketpair_mesh(world: int, buffer_bytes: int | None = None) -> list[dict[int, PeerLink]]:
    """A full mesh of AF_UNIX socket pairs for `world` ranks in one process (tests, in-process replay): a pair
    per direction, as `connect_mesh` has a connection per direction. `buffer_bytes` (tests) sets every
    socket's send and receive buffer, so that small ones keep sends queued across steps."""
    mesh: list[dict[int, PeerLink]] = [{} for _ in range(world)]
    for a in range(world):
        for b in range(a + 1, world):
            a_out, b_in = socket.socketpair()
            b_out, a_in = socket.socketpair()
            mesh[a][b] = PeerLink(a_out, a_in)
            mesh[b][a] = PeerLink(b_out, b_in)
    if buffer_bytes:
        for peers in mesh:
            for link in peers.values():
                link.send.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
                link.recv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
    return mesh
