"""One step's transfers with one peer in one direction (`Flow`), pumped through a non-blocking socket, and one
step's flows with all its peers in progress (`StepExchange`, driven by `genie.engine.transport.SocketTransport`
and the replay's `SocketMover`). Several regions with real data for one peer (an aggregated step, such as PAT's)
move as one gathered send / scattered receive."""

from __future__ import annotations

import fcntl
import os
import select
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Sequence

from genie.engine.links import PeerFailure, PeerLink

_MAX_GATHER = 64  # regions per gathered send (well under IOV_MAX)
_SIOCOUTQNSD = 0x894B  # <linux/sockios.h>: bytes in a TCP socket's send queue that TCP has not sent yet
_UNSENT = struct.Struct("i")
SENT_POLL_S = 0.0002  # how often `wait_sent` looks again
_DONTWAIT = socket.MSG_DONTWAIT  # sockets stay in blocking mode; every non-blocking attempt says so per call
#: a payload-agnostic receive's flag: TCP consumes the bytes without copying them out (tcp(7), MSG_TRUNC); a socket
#: that cannot (AF_UNIX: the tests' socket pairs) copies them into the scratch window as without it
DISCARD = int(socket.MSG_TRUNC)  # an int: `|` on the socket module's IntFlag members runs enum code in Python
_EPOLL_IN = select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP | select.EPOLLRDHUP
_EPOLL_OUT = select.EPOLLOUT | select.EPOLLERR | select.EPOLLHUP


@dataclass(slots=True)
class Transfer:
    """`size_bytes` to or from `peer`; `view` is where the bytes come from / land (None: content is irrelevant)."""

    peer: int
    size_bytes: int
    view: memoryview | None = None


class Flow:
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


def send_failure(rank: int, peer: int, exc: OSError) -> PeerFailure:
    return PeerFailure(f"rank {rank}: connection to rank {peer} lost while sending ({exc.strerror or exc})",
                       peer=peer)


def send_error(rank: int, peer: int, error: int) -> Exception:
    """What a send that failed with errno `error` in a compiled loop raises, as `pump_send` raises it: a
    PeerFailure naming `peer` for a broken pipe or a reset, else the OSError itself (by errno)."""
    exc = OSError(error, os.strerror(error))  # BrokenPipeError, ConnectionResetError... by errno
    if isinstance(exc, (BrokenPipeError, ConnectionResetError)):
        return send_failure(rank, peer, exc)
    return exc


def closed_failure(rank: int, peer: int, done_bytes: int, total_bytes: int) -> PeerFailure:
    return PeerFailure(f"rank {rank}: rank {peer} closed the connection ({done_bytes} of {total_bytes} bytes "
                       f"received)", peer=peer)


def gathered(flow: Flow) -> list[memoryview] | None:
    """The flow's next regions for one gathered send / scattered receive when it has several with real data
    (an aggregated step, such as PAT's): they travel as one segment and wake the peer once, as NCCL packs
    PAT's blocks into one buffer step. None: one region (or no data), moved by the plain loop."""
    queue = flow.queue
    if len(queue) < 2 or any(t.view is None for t in queue):
        return None
    first = queue[0]
    return [first.view[flow.pos:first.size_bytes], *(queue[i].view for i in range(1, min(len(queue), _MAX_GATHER)))]


def _next_region(flow: Flow, window: memoryview) -> memoryview:
    """Where the front transfer's next bytes come from or go: the rest of its buffer, or (no data, a size only)
    as much of the scratch ``window`` as it has left."""
    t = flow.queue[0]
    if t.view is not None:
        return t.view[flow.pos:t.size_bytes]
    return window[:min(t.size_bytes - flow.pos, len(window))]


def _advance(flow: Flow, n: int) -> None:
    """Account `n` bytes moved from the front of the flow's queue."""
    flow.done_bytes += n
    queue = flow.queue
    while n > 0:
        left = queue[0].size_bytes - flow.pos
        if n < left:
            flow.pos += n
            return
        n -= left
        queue.popleft()
        flow.pos = 0


def pump_send(flow: Flow, window: memoryview, rank: int) -> bool:
    """Send as much as the socket takes; True when the flow is complete."""
    queue = flow.queue
    send = flow.sock.send
    while (parts := gathered(flow)) is not None:  # several regions for one peer: one call (see gathered)
        try:
            n = flow.sock.sendmsg(parts, (), _DONTWAIT)
        except BlockingIOError:
            return False
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise send_failure(rank, flow.peer, exc) from None
        if n <= 0:
            return False
        _advance(flow, n)
    while queue:
        try:
            n = send(_next_region(flow, window), _DONTWAIT)
        except BlockingIOError:
            return False
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise send_failure(rank, flow.peer, exc) from None
        _advance(flow, n)
    return True


def pump_recv(flow: Flow, window: memoryview, rank: int, flags: int = _DONTWAIT) -> bool:
    """Receive what has arrived (with ``flags=0``: block in each call, bounded by the socket's SO_RCVTIMEO);
    True when the flow is complete, False when the socket has nothing more now. A transfer without a view is
    received with `DISCARD`: TCP drops its bytes uncopied."""
    queue = flow.queue
    recv_into = flow.sock.recv_into
    discard = int(flags) | DISCARD
    while (parts := gathered(flow)) is not None:
        try:
            n = flow.sock.recvmsg_into(parts, 0, flags)[0]
        except (BlockingIOError, InterruptedError):
            return False
        except ConnectionResetError:
            n = 0
        if n == 0:
            raise closed_failure(rank, flow.peer, flow.done_bytes, flow.total_bytes)
        _advance(flow, n)
    while queue:
        try:
            n = recv_into(_next_region(flow, window), 0, flags if queue[0].view is not None else discard)
        except (BlockingIOError, InterruptedError):
            return False
        except ConnectionResetError:
            n = 0
        if n == 0:
            raise closed_failure(rank, flow.peer, flow.done_bytes, flow.total_bytes)
        _advance(flow, n)
    return True


def unsent_bytes(sock: socket.socket) -> int:
    """Bytes `sock` (TCP) holds that TCP has not handed to the network yet: the send queue minus what is in
    flight. 0 for a socket the kernel cannot say it of (gone, not TCP)."""
    try:
        return _UNSENT.unpack(fcntl.ioctl(sock.fileno(), _SIOCOUTQNSD, bytes(_UNSENT.size)))[0]
    except OSError:
        return 0


def wait_sent(rank: int, socks: dict[int, socket.socket], timeout_s: float) -> None:
    """Return once TCP has sent everything queued on `socks` ({peer: send socket}): nothing is left in them
    that later writes to other sockets could overtake (see `SocketTransport.flush`). Raise PeerFailure naming
    a peer whose bytes are still not sent after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    pending = dict(socks)
    while True:
        pending = {peer: sock for peer, sock in pending.items() if unsent_bytes(sock) > 0}
        if not pending:
            return
        if time.monotonic() >= deadline:
            peer, sock = min(pending.items())
            raise PeerFailure(f"rank {rank}: op timed out after {timeout_s:g} s: {unsent_bytes(sock)} bytes to "
                              f"rank {peer} not yet sent")
        time.sleep(SENT_POLL_S)


class StepExchange:
    """The sends and receives of one schedule step in progress over `links` (peer -> `PeerLink`). Driven by
    `progress()` (try everything) and `on_ready(peer, events)` (a readiness event of either of that peer's
    sockets: a read event tries the receive connection, a write event the send connection).

    `outbox` (peer -> flow) is where the sends queue: a transport passes its own, which outlives the step, so
    sends of earlier steps still in progress go first and keep moving; with `wait_for_sends=False` the step is
    complete once its receives are."""

    __slots__ = ("rank", "window", "pending_out", "pending_in", "wait_for_sends", "unsent")

    def __init__(self, rank: int, links: dict[int, PeerLink], sends: Sequence[Transfer],
                 recvs: Sequence[Transfer], window: memoryview, *, outbox: dict[int, Flow] | None = None,
                 wait_for_sends: bool = True, drain: dict[int, socket.socket] | None = None) -> None:
        self.rank = rank
        self.window = window
        self.wait_for_sends = wait_for_sends
        self.unsent = drain  # {peer: send socket} that TCP must have sent all of before the step is complete
        self.pending_out: dict[int, Flow] = {} if outbox is None else outbox
        self.pending_in: dict[int, Flow] = {}
        for flows, transfers, sending in ((self.pending_out, sends, True), (self.pending_in, recvs, False)):
            for t in transfers:
                flow = flows.get(t.peer)
                if flow is None:
                    try:
                        link = links[t.peer]
                    except KeyError:
                        raise PeerFailure(f"rank {rank}: no connection to rank {t.peer}") from None
                    flow = flows[t.peer] = Flow(t.peer, link.send if sending else link.recv)
                flow.add(t)

    @property
    def done(self) -> bool:
        if self.pending_in or (self.wait_for_sends and self.pending_out):
            return False
        if self.unsent:  # `drain`: see `SocketTransport.flush`
            self.unsent = {peer: sock for peer, sock in self.unsent.items() if unsent_bytes(sock) > 0}
        return not self.unsent

    @property
    def draining(self) -> bool:
        """Only TCP's sending of the drained sockets is left: no readiness event will say when it is done."""
        return bool(self.unsent) and not self.pending_in and not self.pending_out

    def progress(self) -> bool:
        """Push every pending flow as far as the sockets allow; True when the step is complete."""
        window, rank = self.window, self.rank
        for peer in [p for p, f in self.pending_out.items() if pump_send(f, window, rank)]:
            del self.pending_out[peer]
        for peer in [p for p, f in self.pending_in.items() if pump_recv(f, window, rank)]:
            del self.pending_in[peer]
        return self.done

    def on_ready(self, peer: int, events: int) -> bool:
        if events & _EPOLL_IN:
            flow = self.pending_in.get(peer)
            if flow is not None and pump_recv(flow, self.window, self.rank):
                del self.pending_in[peer]
        if events & _EPOLL_OUT:
            flow = self.pending_out.get(peer)
            if flow is not None and pump_send(flow, self.window, self.rank):
                del self.pending_out[peer]
        return self.done

    def describe_pending(self) -> str:
        parts = [f"sending to rank {p} ({f.done_bytes}/{f.total_bytes} bytes)"
                 for p, f in sorted(self.pending_out.items())]
        parts += [f"receiving from rank {p} ({f.done_bytes}/{f.total_bytes} bytes)"
                  for p, f in sorted(self.pending_in.items())]
        return ", ".join(parts)
