"""An op that sent in bulk to several peers ends only once TCP has sent all of it (`SocketTransport.flush`),
so no later op's data can overtake its last pieces in the host's queue. Over loopback TCP: a receiver that does
not read keeps the sender's bytes unsent (its window is full), as TCP small queues does on a shaped link."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from genie.engine.flows import unsent_bytes
from genie.engine.transport import HELD_BACK_MIN_BYTES, PeerFailure, PeerLink, SocketTransport, Transfer

SIZE = 4 * HELD_BACK_MIN_BYTES


class Peers:
    """Rank 0's transport with a link to each of `peers`; the peers' ends of rank 0's send connections have a
    tiny receive buffer and are read only when the test says so."""

    def __init__(self, peers: tuple[int, ...]) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by accepted sockets
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.sockets: list[socket.socket] = [self.listener]
        self.receivers: dict[int, socket.socket] = {}
        links = {}
        for peer in peers:
            out = socket.socket()
            out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * SIZE)
            out.connect(self.listener.getsockname())
            self.receivers[peer], _ = self.listener.accept()
            back = socket.create_connection(self.listener.getsockname())
            back_in, _ = self.listener.accept()
            self.sockets += [out, self.receivers[peer], back, back_in]
            links[peer] = PeerLink(out, back_in)
        self.transport = SocketTransport(0, links)
        self.sends = {peer: link.send for peer, link in links.items()}

    def drain(self, peer: int, size: int) -> None:
        got = 0
        while got < size:
            got += len(self.receivers[peer].recv(1 << 16))

    def close(self) -> None:
        self.transport.close()
        for s in self.sockets:
            s.close()


@pytest.fixture
def two_peers():
    peers = Peers((1, 2))
    yield peers
    peers.close()


def _send(peers: Peers, targets: tuple[int, ...]) -> None:
    peers.transport.exchange([Transfer(p, SIZE) for p in targets], [], timeout_s=5, wait_for_sends=False)
    peers.transport.exchange([], [], timeout_s=5)  # the outbox emptied into the sockets
    assert all(unsent_bytes(peers.sends[p]) > 0 for p in targets)  # held back in the kernel


def test_flush_after_bulk_sends_to_several_peers_waits_until_tcp_sent_them(two_peers):
    _send(two_peers, (1, 2))
    returned = threading.Event()
    thread = threading.Thread(target=lambda: (two_peers.transport.flush(10), returned.set()))
    thread.start()
    time.sleep(0.2)
    assert not returned.is_set()  # the bytes are still in rank 0's sockets
    two_peers.drain(1, SIZE)
    time.sleep(0.1)
    assert not returned.is_set()  # peer 2's are still there
    two_peers.drain(2, SIZE)
    thread.join(10)
    assert returned.is_set()
    assert unsent_bytes(two_peers.sends[1]) == 0 and unsent_bytes(two_peers.sends[2]) == 0


def test_flush_after_bulk_sends_to_one_peer_does_not_wait(two_peers):
    """One connection keeps its own order: nothing can overtake its bytes, so the op ends as before."""
    _send(two_peers, (1,))
    two_peers.transport.flush(0.05)
    assert unsent_bytes(two_peers.sends[1]) > 0


def test_small_sends_to_several_peers_do_not_wait():
    """Messages of one GSO packet or less are never held back in part; the latency path pays nothing."""
    peers = Peers((1, 2))
    try:
        size = HELD_BACK_MIN_BYTES
        for _ in range(8):  # fill the receivers' windows so the kernel holds bytes
            peers.transport.exchange([Transfer(1, size), Transfer(2, size)], [], timeout_s=5, wait_for_sends=False)
        peers.transport.exchange([], [], timeout_s=5)
        assert unsent_bytes(peers.sends[1]) > 0
        peers.transport.flush(0.05)
    finally:
        peers.close()


def test_flush_names_the_peer_whose_bytes_tcp_could_not_send(two_peers):
    _send(two_peers, (1, 2))
    two_peers.drain(1, SIZE)
    with pytest.raises(PeerFailure, match=r"rank 0: op timed out after 0.2 s: \d+ bytes to rank 2 not yet sent"):
        two_peers.transport.flush(0.2)


def test_replay_collective_that_sent_in_bulk_to_several_peers_completes_once_tcp_sent_it(two_peers):
    """The replay's mover gives a collective node the bench's op end: its last step completes only when TCP has
    sent everything, and the mover notices that without a readiness event."""
    from genie.core.program import Lane, ProgramNode
    from genie.core.schedule import Send, Step
    from genie.engine.socket_mover import SocketMover
    from genie.engine.walker import CommRun

    links = {(0, p): PeerLink(s, two_peers.transport._links[p].recv) for p, s in two_peers.sends.items()}
    mover = SocketMover(0, links)
    node = ProgramNode(0, "a2a", Lane.COLLECTIVE, (), channel=0, size_bytes=2 * SIZE)
    run = CommRun(node, (Step(sends=(Send(1, 0, SIZE), Send(2, 0, SIZE))),), time.monotonic_ns(), 1e12)
    try:
        assert not run.advance(mover)  # in the sockets, not yet sent
        mover.watch(run)
        assert mover.wait(0.05, None) == []
        two_peers.drain(1, SIZE)
        two_peers.drain(2, SIZE)
        deadline = time.monotonic() + 5
        done = []
        while not done and time.monotonic() < deadline:
            done = mover.wait(1.0, None)
        assert done == [run]
    finally:
        mover.epoll.close()
        mover.timer.close()
