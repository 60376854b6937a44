"""The compiled exchange's bulk sends over TCP come from a memory file holding the window's bytes (`sendfile`: TCP
takes the file's pages, no copy of the window; genie/engine/exchange_loop.pyx). What the peers get must not change:
the same bytes (the window's), the streams aligned for the next op, the sockets' flags as they were, the same
failures; where the file cannot be used the loop copies as before. Loopback TCP in one process (no root)."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import threading
import time

import pytest

from engine_support import run_ranks
from genie.collectives import check
from genie.collectives.registry import build_schedule
from genie.core.collective import Algorithm, Collective
from genie.core.schedule import CollectiveOp
from genie.engine import compiled_exchange
from genie.engine.executor import DataBuffers, run_schedule, run_timed_ops, transfer_plan
from genie.engine.links import PeerFailure, PeerLink, socketpair_mesh
from genie.engine.transport import SocketTransport, Transfer

pytestmark = pytest.mark.skipif(compiled_exchange.ExchangeLoop is None and not os.environ.get("CI"),
                                reason="genie.engine.exchange_loop is not built (pip install -e . builds it)")

BULK = 300_000  # per peer: over FILE_SEND_MIN_BYTES, several calls through small buffers


def _connected_pair(listener: socket.socket) -> tuple[socket.socket, socket.socket]:
    out = socket.create_connection(listener.getsockname())
    into, _ = listener.accept()
    return out, into


def _tcp_mesh(ranks: int, buffer_bytes: int | None = None) -> list[dict[int, PeerLink]]:
    """A connection per direction between every two ranks over 127.0.0.1, as `connect_mesh` makes them."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(2 * ranks * ranks)
    mesh: list[dict[int, PeerLink]] = [{} for _ in range(ranks)]
    for a in range(ranks):
        for b in range(a + 1, ranks):
            a_out, b_in = _connected_pair(listener)
            b_out, a_in = _connected_pair(listener)
            if buffer_bytes:
                for sock in (a_out, b_out):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
                for sock in (a_in, b_in):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
            mesh[a][b] = PeerLink(a_out, a_in)
            mesh[b][a] = PeerLink(b_out, b_in)
    listener.close()
    return mesh


def _rank_over_tcp(peers: int, *, compiled: bool = True):
    """Rank 0's transport over TCP to `peers` peers, and each peer's far ends {peer: (reads rank 0's sends,
    writes rank 0's receives)}."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(2 * peers)
    links, far = {}, {}
    for peer in range(1, peers + 1):
        out, out_far = _connected_pair(listener)
        in_far, into = _connected_pair(listener)
        links[peer] = PeerLink(out, into)
        far[peer] = (out_far, in_far)
    listener.close()
    return SocketTransport(0, links, compiled=compiled), far


def _close(far: dict) -> None:
    for ends in far.values():
        for sock in ends:
            sock.close()


def _loop(transport: SocketTransport):
    return transport._compiled_exchange._loop


def _nonblocking(sock: socket.socket) -> bool:
    return bool(fcntl.fcntl(sock.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK)


def _read_all(sock: socket.socket, size: int, into: list) -> None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(1 << 16, size - len(data)))
        if not chunk:
            break
        data += chunk
    into.append(bytes(data))


def _untimed(mine, transport):
    plan = transfer_plan(mine)
    for _ in range(3):
        run_schedule(mine, transport, timeout_s=20, plan=plan)


def _timed(mine, transport):
    assert run_timed_ops(mine, transport, transfer_plan(mine), 3, timeout_s=20) is not None


@pytest.mark.parametrize("buffer_bytes", [None, 1 << 16])  # 64 KiB buffers: sends queued into the op's flush
@pytest.mark.parametrize("run_ops", [_untimed, _timed], ids=["step by step", "ops back to back"])
def test_bulk_tcp_sends_come_from_the_file_and_the_streams_stay_aligned(run_ops, buffer_bytes):
    """Payload-agnostic all-to-alls over TCP, step by step (`run`) and back to back (`run_ops`), then a verified
    op on the same connections: every byte consumed where it should be, the file carried the bulk, and the send
    sockets are blocking again afterwards."""
    ranks = 4
    op = CollectiveOp(Collective.ALL_TO_ALL, ranks * BULK, tuple(range(ranks)), Algorithm.DIRECT, dtype_bytes=4)
    schedule = build_schedule(op)
    mesh = _tcp_mesh(ranks, buffer_bytes)
    problems, file_bytes, flags, errors = {}, {}, {}, []

    def rank_main(rank: int) -> None:
        transport = SocketTransport(rank, mesh[rank])
        mine = schedule.for_rank(rank)
        try:
            assert _loop(transport).file_slots() == list(range(ranks - 1))
            run_ops(mine, transport)
            file_bytes[rank] = _loop(transport).file_sent_bytes
            flags[rank] = [_nonblocking(link.send) for link in mesh[rank].values()]
            data = DataBuffers(check.initial_buffers(op, rank))
            run_schedule(mine, transport, timeout_s=20, data=data)
            problems[rank] = check.verify_buffers(op, rank, data.arrays)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    run_ranks(rank_main, ranks, mesh)
    assert not errors, errors
    assert all(not p for p in problems.values()), problems
    assert all(b > 0 for b in file_bytes.values()), file_bytes
    assert flags == {r: [False] * (ranks - 1) for r in range(ranks)}


@pytest.mark.parametrize("compiled", [True, False])
def test_the_peers_get_the_window_s_bytes(compiled):
    """What the file sends is what the reference sends from the window: its bytes (zeros), exactly as many."""
    transport, far = _rank_over_tcp(2, compiled=compiled)
    try:
        got = _bulk_exchange(transport, far, BULK)
        assert got == [bytes(transport._window[:BULK])] * 2 == [bytes(BULK)] * 2
        if compiled:
            assert 0 < _loop(transport).file_sent_bytes <= 2 * BULK
            assert not any(_nonblocking(link.send) for link in transport._links.values())
    finally:
        transport.close()
        _close(far)


def test_small_sends_and_socket_pairs_copy():
    """Below FILE_SEND_MIN_BYTES a send copies; socket pairs (receives that copy into the window) have no file."""
    transport, far = _rank_over_tcp(2)
    try:
        for _, writer in far.values():
            writer.sendall(b"r" * 10)
        small = compiled_exchange.FILE_SEND_MIN_BYTES - 1
        got: list = []
        readers = [threading.Thread(target=_read_all, args=(reader, small, got)) for reader, _ in far.values()]
        for r in readers:
            r.start()
        transport.exchange([Transfer(1, small), Transfer(2, small)], [Transfer(1, 10), Transfer(2, 10)],
                           timeout_s=10)
        for r in readers:
            r.join(10)
        assert got == [bytes(small)] * 2
        assert _loop(transport).file_sent_bytes == 0
    finally:
        transport.close()
        _close(far)
    mesh = socketpair_mesh(2)
    pairs = SocketTransport(0, mesh[0])
    assert _loop(pairs).file_slots() == []
    pairs.close()
    for link in mesh[1].values():
        link.close()


def test_a_failed_step_gives_the_sockets_their_flags_back():
    """A step that times out (silent peers, sends stuck in full buffers) and one ended by a signal handler's
    exception leave the send sockets blocking, as they found them."""
    transport, far = _rank_over_tcp(2)
    try:
        with pytest.raises(PeerFailure, match=r"^rank 0: op timed out after 0\.3 s sending to rank 1"):
            transport.exchange([Transfer(1, 64 << 20), Transfer(2, 64 << 20)], [Transfer(1, 10), Transfer(2, 10)],
                               timeout_s=0.3)
        assert _loop(transport).file_sent_bytes > 0
        assert not any(_nonblocking(link.send) for link in transport._links.values())
    finally:
        transport.close()
        _close(far)
    transport, far = _rank_over_tcp(2)
    waiter = threading.get_ident()

    def interrupt(*_):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    timer = threading.Timer(0.1, signal.pthread_kill, (waiter, signal.SIGALRM))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            transport.exchange([Transfer(1, 64 << 20), Transfer(2, 64 << 20)], [Transfer(1, 10), Transfer(2, 10)],
                               timeout_s=5)
        assert not any(_nonblocking(link.send) for link in transport._links.values())
    finally:
        timer.cancel()
        signal.signal(signal.SIGALRM, previous)
        transport.close()
        _close(far)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_tcp_peer_gone_is_named_as_the_reference_names_it(compiled):
    """The peer of a bulk send closes its end: the send fails (a reset or a broken pipe) and names that peer."""
    transport, far = _rank_over_tcp(2, compiled=compiled)
    try:
        reader, _ = far[2]
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")  # close resets
        reader.close()
        time.sleep(0.05)
        for _, writer in far.values():
            writer.sendall(b"r" * 10)
        with pytest.raises(PeerFailure, match=r"^rank 0: connection to rank 2 lost while sending") as failure:
            transport.exchange([Transfer(2, 8 << 20)], [Transfer(1, 10), Transfer(2, 10)], timeout_s=5)
        assert failure.value.peer == 2
        if compiled:
            assert not any(_nonblocking(link.send) for link in transport._links.values())
    finally:
        transport.close()
        _close(far)


def test_a_socket_that_refuses_the_file_s_pages_is_sent_to_by_copy():
    """sendfile refuses a socket (EINVAL: here one opened for appending): that peer's sends copy from then on and
    it gets every byte; the other peer's still come from the file; the socket keeps its own flags."""
    transport, far = _rank_over_tcp(2)
    try:
        sock = transport._links[1].send
        flags = fcntl.fcntl(sock.fileno(), fcntl.F_GETFL)
        fcntl.fcntl(sock.fileno(), fcntl.F_SETFL, flags | os.O_APPEND)
        got: list = []
        reader = threading.Thread(target=_read_all, args=(far[1][0], BULK, got))
        reader.start()
        other = threading.Thread(target=_read_all, args=(far[2][0], BULK, []))
        other.start()
        for _, writer in far.values():
            writer.sendall(b"r" * 10)
        transport.exchange([Transfer(1, BULK), Transfer(2, BULK)], [Transfer(1, 10), Transfer(2, 10)], timeout_s=10)
        reader.join(10)
        other.join(10)
        assert got == [bytes(BULK)]
        assert _loop(transport).file_slots() == [1]  # peer 2's slot
        assert 0 < _loop(transport).file_sent_bytes <= BULK
        assert fcntl.fcntl(sock.fileno(), fcntl.F_GETFL) == flags | os.O_APPEND
    finally:
        transport.close()
        _close(far)


def _window_files() -> int:
    """The memory files of windows this process holds open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += "genie-window" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            pass
    return count


def _bulk_exchange(transport: SocketTransport, far: dict, size: int) -> list:
    got: list = []
    readers = [threading.Thread(target=_read_all, args=(reader, size, got)) for reader, _ in far.values()]
    for r in readers:
        r.start()
    for _, writer in far.values():
        writer.sendall(b"r" * 10)
    transport.exchange([Transfer(p, size) for p in far], [Transfer(p, 10) for p in far], timeout_s=10)
    for r in readers:
        r.join(10)
    return got


def test_the_file_is_made_at_the_first_bulk_send_and_closed_with_the_transport():
    """No memory for a run without bulk sends; one file per transport, gone when the transport closes."""
    before = _window_files()
    transport, far = _rank_over_tcp(2)
    try:
        assert _bulk_exchange(transport, far, 1000) == [bytes(1000)] * 2
        assert _window_files() == before
        assert _bulk_exchange(transport, far, BULK) == [bytes(BULK)] * 2
        assert _bulk_exchange(transport, far, BULK) == [bytes(BULK)] * 2
        assert _window_files() == before + 1
    finally:
        transport.close()
        _close(far)
    assert _window_files() == before


def test_without_a_memory_file_or_an_ignored_sigpipe_every_send_copies(monkeypatch):
    """No memfd (an old kernel), or SIGPIPE not ignored (sendfile cannot pass MSG_NOSIGNAL): no file, the loop's
    sends copy and the peers get every byte."""
    def no_memfd(*_):
        raise OSError(38, "Function not implemented")

    previous = signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        default = _rank_over_tcp(2)
    finally:
        signal.signal(signal.SIGPIPE, previous)
    assert _loop(default[0]).file_slots() == []
    made = [default, _rank_over_tcp(2)]
    try:
        with monkeypatch.context() as patch:
            patch.setattr(os, "memfd_create", no_memfd)
            for transport, far in made:
                assert _bulk_exchange(transport, far, BULK) == [bytes(BULK)] * 2
                assert _loop(transport).file_slots() == [] and _loop(transport).file_sent_bytes == 0
                assert not any(_nonblocking(link.send) for link in transport._links.values())
    finally:
        for transport, far in made:
            transport.close()
            _close(far)


def test_sigpipe_set_back_to_default_after_the_loop_was_built_sends_copy_that_run():
    """The kernel's SIGPIPE disposition is read as each run begins (a library may reset it after the transport was
    built): while it is not ignored a bulk send copies - a broken pipe would kill the rank otherwise - and the file
    is used again once it is ignored again."""
    transport, far = _rank_over_tcp(2)
    try:
        assert _loop(transport).file_slots() != []
        previous = signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        try:
            assert _bulk_exchange(transport, far, BULK) == [bytes(BULK)] * 2
            assert _loop(transport).file_sent_bytes == 0
            assert not any(_nonblocking(link.send) for link in transport._links.values())
        finally:
            signal.signal(signal.SIGPIPE, previous)
        assert _bulk_exchange(transport, far, BULK) == [bytes(BULK)] * 2
        assert _loop(transport).file_sent_bytes > 0
    finally:
        transport.close()
        _close(far)
