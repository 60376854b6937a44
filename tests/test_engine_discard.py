"""Payload-agnostic receives over TCP are discarded by the kernel (MSG_TRUNC), not copied into the scratch window:
the receive copy was the largest item of a rank's CPU in the 1-4 MiB all-to-all (issue #36 item 3). The bytes
must still be consumed exactly, or the next op on the connection would read the wrong ones."""

import socket
import threading

import pytest

from genie.engine.flows import Flow, pump_recv
from genie.engine.transport import PeerLink, SocketTransport, Transfer


def _tcp_links(peers: int):
    """A rank 0 with a `PeerLink` to each of `peers` peers over 127.0.0.1, and each peer's sending socket."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    links, senders, spare = {}, {}, []
    for peer in range(1, peers + 1):
        senders[peer] = socket.create_connection(listener.getsockname())
        into, _ = listener.accept()
        out = socket.create_connection(listener.getsockname())
        out_far, _ = listener.accept()
        links[peer] = PeerLink(out, into)
        spare.append(out_far)
    listener.close()
    return links, senders, spare


def _pattern(size: int, seed: int) -> bytes:
    return bytes((seed + i) % 251 for i in range(size))


@pytest.mark.parametrize("peers", [1, 3])  # one peer: the lean receive (`finish_recv`); several: `StepExchange`
def test_payload_agnostic_receive_consumes_exactly_its_bytes_and_copies_none(peers):
    links, senders, spare = _tcp_links(peers)
    transport = SocketTransport(0, links)
    size = 300_000  # several segments and reads
    try:
        writers = [threading.Thread(target=senders[p].sendall, args=(_pattern(size, p) + _pattern(4096, 100 + p),))
                   for p in senders]
        for w in writers:
            w.start()
        transport.exchange([], [Transfer(p, size) for p in senders], timeout_s=10)
        assert not any(transport._window[:size]), "the kernel discards the bytes: nothing lands in the window"
        for p in senders:  # the next message on each connection starts exactly where the discarded one ended
            landing = bytearray(4096)
            transport.exchange([], [Transfer(p, 4096, memoryview(landing))], timeout_s=10)
            assert bytes(landing) == _pattern(4096, 100 + p)
        for w in writers:
            w.join()
    finally:
        transport.close()
        for s in (*senders.values(), *spare):
            s.close()


def test_socket_pairs_still_receive_payload_agnostic_bytes():
    """AF_UNIX stream sockets (the tests' and the in-process replay's meshes) ignore MSG_TRUNC and copy into the
    window; the count is still exact."""
    a, b = socket.socketpair()
    try:
        a.sendall(b"x" * 1000 + b"y" * 10)
        flow = Flow(1, b)
        flow.add(Transfer(1, 1000))
        window = memoryview(bytearray(4096))
        assert pump_recv(flow, window, 0, 0)
        assert b.recv(64) == b"y" * 10
    finally:
        a.close()
        b.close()
