"""A non-blocking read that returns less than it asked for has emptied its socket, so `pump_recv` does not try
again (the failing attempt cost a system call and an exception per wake-up: ~a third of the reads of a rank's
1 MiB all-to-all, benchmarks/README.md "Slow iterations"). A later byte raises a new edge in the edge-triggered
epoll sets, so nothing is missed: the exchange over real sockets below completes byte for byte."""

import socket
import threading

from genie.engine.flows import DISCARD, Flow, Transfer, pump_recv
from genie.engine.transport import PeerLink, SocketTransport


class _Socket:
    """A socket whose reads return what `chunks` holds (then EAGAIN), counting the calls."""

    def __init__(self, chunks):
        self.chunks = list(chunks)
        self.calls = []

    def recv_into(self, buf, nbytes=0, flags=0):
        self.calls.append((len(buf), flags))
        if not self.chunks:
            raise BlockingIOError
        n = min(self.chunks.pop(0), len(buf))
        return n

    def recvmsg_into(self, buffers, ancbufsize=0, flags=0):
        self.calls.append((sum(len(b) for b in buffers), flags))
        if not self.chunks:
            raise BlockingIOError
        return min(self.chunks.pop(0), sum(len(b) for b in buffers)), [], 0, None


def _flow(sock, *transfers):
    flow = Flow(1, sock)
    for t in transfers:
        flow.add(t)
    return flow


def test_a_short_nonblocking_read_is_the_last_attempt():
    sock = _Socket([40_000, 30_000])  # the second chunk arrives "later": it must not be read now
    flow = _flow(sock, Transfer(1, 128 << 10))
    assert not pump_recv(flow, memoryview(bytearray(1 << 20)), 0)
    assert len(sock.calls) == 1 and sock.calls[0][1] & DISCARD
    assert flow.done_bytes == 40_000
    assert not pump_recv(flow, memoryview(bytearray(1 << 20)), 0)  # the next edge: one read again
    assert len(sock.calls) == 2 and flow.done_bytes == 70_000


def test_a_full_read_goes_on_to_the_next_transfer_and_completes():
    sock = _Socket([1000, 500])
    flow = _flow(sock, Transfer(1, 1000), Transfer(1, 500))
    assert pump_recv(flow, memoryview(bytearray(4096)), 0)
    assert len(sock.calls) == 2 and flow.done_bytes == 1500


def test_a_short_gathered_read_is_the_last_attempt():
    a, b = bytearray(1000), bytearray(1000)
    sock = _Socket([600, 1400])
    flow = _flow(sock, Transfer(1, 1000, memoryview(a)), Transfer(1, 1000, memoryview(b)))
    assert not pump_recv(flow, memoryview(bytearray(16)), 0)
    assert len(sock.calls) == 1 and flow.done_bytes == 600
    assert pump_recv(flow, memoryview(bytearray(16)), 0)
    assert flow.done_bytes == 2000


def test_blocking_reads_still_loop_until_complete():
    """With ``flags=0`` (a blocking receive) a short read is normal and the pump reads on."""
    sock = _Socket([100, 200, 300])
    flow = _flow(sock, Transfer(1, 600))
    assert pump_recv(flow, memoryview(bytearray(4096)), 0, 0)
    assert len(sock.calls) == 3


def test_many_peers_trickling_in_are_all_received_exactly():
    """Over TCP on loopback, several peers' messages written in small pieces with pauses (so the rank waits in
    epoll after short reads) arrive whole, and the next message on each connection starts where it should."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    links, senders, spare = {}, {}, []
    for peer in range(1, 4):
        senders[peer] = socket.create_connection(listener.getsockname())
        into, _ = listener.accept()
        out = socket.create_connection(listener.getsockname())
        spare.append(listener.accept()[0])
        links[peer] = PeerLink(out, into)
    listener.close()
    transport = SocketTransport(0, links)
    size, piece = 200_000, 7_000
    stop = threading.Event()

    def write(p):
        data = bytes(size) + bytes((p + i) % 251 for i in range(512))
        for at in range(0, len(data), piece):
            senders[p].sendall(data[at:at + piece])
            stop.wait(0.001)

    writers = [threading.Thread(target=write, args=(p,)) for p in senders]
    try:
        for w in writers:
            w.start()
        transport.exchange([], [Transfer(p, size) for p in senders], timeout_s=20)
        for p in senders:
            landing = bytearray(512)
            transport.exchange([], [Transfer(p, 512, memoryview(landing))], timeout_s=20)
            assert bytes(landing) == bytes((p + i) % 251 for i in range(512))
    finally:
        stop.set()
        for w in writers:
            w.join()
        transport.close()
        for s in (*senders.values(), *spare):
            s.close()
