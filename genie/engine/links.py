"""A rank's connections with its peers (pure sockets, no genie state): a send and a receive connection per peer
(`PeerLink`), how a rank makes them - over TCP between namespaces (`listen_socket`, `connect_mesh`) or as socket
pairs inside one process (`socketpair_mesh`, the tests' and the in-process replay's) - and tunes them (no Nagle,
cubic, delayed ACKs on the receive side), which path each took (`flow_tuples`), and the failure a peer's
connection gives (`PeerFailure`). `genie.engine.transport` moves the bytes over them.
"""

from __future__ import annotations

import errno
import functools
import socket
import struct
import time
from dataclasses import dataclass
from typing import Callable

from genie.core.congestion import CongestionControl, pin_congestion
from genie.core.errors import RunFailure
from genie.core.flowpath import FlowTuple

_LINK_HEADER = struct.Struct("!II")  # (rank, channel) sent by the connecting side


class PeerFailure(RunFailure):
    """A peer closed its connection, reset it, or did not keep up within the op timeout. `peer`: the rank whose
    connection closed or reset, if that is the failure (so an orchestrator can tell it is that rank's death,
    seen from here); a timeout names no `peer`: the silent rank may be alive and stuck."""

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


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


def _tune(sock: socket.socket, buffer_bytes: int | None, congestion: CongestionControl) -> None:
    """No Nagle; `congestion` pinned (`genie.core.congestion.pin_congestion`: results must not depend on the
    machine's default); the buffers `buffer_bytes` if set."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pin_congestion(sock, congestion)
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
                 links: frozenset[tuple[int, int]], timeout_s: float, buffer_bytes: int | None = None,
                 congestion: CongestionControl = CongestionControl.CUBIC) -> dict[tuple[int, int], PeerLink]:
    """A `PeerLink` per (channel, peer) link: this rank connects its send connection to each peer and accepts
    each peer's (link sets are symmetric). A channel is a communicator: ops of different channels may be in
    flight at once, each on its own connections, as NCCL gives each communicator its own. Connecting comes
    first: `listener`'s backlog (`listen_socket`) holds the peers' connections until they are accepted. Every
    connection uses `congestion` (`genie.core.congestion`). Returns {(channel, peer): PeerLink}."""
    deadline = time.monotonic() + timeout_s
    sends: dict[tuple[int, int], socket.socket] = {}
    recvs: dict[tuple[int, int], socket.socket] = {}
    expected = set(links)
    try:
        for channel, peer in sorted(links):
            sends[(channel, peer)] = _connect(rank, channel, peer, addresses[peer], deadline, buffer_bytes,
                                              congestion)
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
            _tune(conn, buffer_bytes, congestion)
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
             buffer_bytes: int | None, congestion: CongestionControl) -> socket.socket:
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _tune(sock, buffer_bytes, congestion)
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
