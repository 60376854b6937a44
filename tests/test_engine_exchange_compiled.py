"""The all-to-all's multi-peer step in the compiled exchange loop (genie/engine/exchange_loop.pyx) against the pure
Python reference it stands in for (`StepExchange` and `SocketTransport._wait_loop`): the same bytes on the same
connections, the same sends left queued where a step ends, the same failures and timeouts worded the same way.
Socket pairs in one process (no root); small socket buffers make the sends block and queue."""

from __future__ import annotations

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
from genie.core.errors import RunFailure
from genie.core.schedule import CollectiveOp
from genie.engine import compiled_exchange, transport as transport_module
from genie.engine.executor import DataBuffers, run_schedule, run_timed_ops, transfer_plan
from genie.engine.links import socketpair_mesh
from genie.engine.transport import PeerFailure, PeerLink, SocketTransport, Transfer

pytestmark = pytest.mark.skipif(compiled_exchange.ExchangeLoop is None and not os.environ.get("CI"),
                                reason="genie.engine.exchange_loop is not built (pip install -e . builds it)")


def test_ci_builds_the_compiled_exchange():
    """CI installs a compiler (scripts/setup.sh): there the compiled exchange must exist, not be skipped."""
    assert compiled_exchange.ExchangeLoop is not None


@pytest.fixture
def reference_steps(monkeypatch):
    """Counts the steps the Python reference moves (`StepExchange`s made by the transport)."""
    made = []
    real = transport_module.StepExchange

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(transport_module, "StepExchange", counting)
    return made


def _alltoall(ranks: int, size_bytes: int, *, compiled: bool, ops: int = 3, buffer_bytes: int | None = None):
    """`ops` payload-agnostic all-to-alls, then one verified one on the same connections (a stream left a byte
    off would misalign it), every rank on a thread. Returns {rank: verification problem}."""
    def untimed(mine, transport):
        plan = transfer_plan(mine)
        for _ in range(ops):
            run_schedule(mine, transport, timeout_s=20, plan=plan)

    return {rank: problem for rank, (_, problem) in _alltoall_runs(ranks, size_bytes, untimed, compiled=compiled,
                                                                    buffer_bytes=buffer_bytes).items()}


def _alltoall_runs(ranks: int, size_bytes: int, run_ops, *, compiled: bool, buffer_bytes: int | None):
    """Every rank on a thread: ``run_ops(its schedule, its transport)``, then one verified all-to-all on the same
    connections. Returns {rank: (what run_ops returned, verification problem)}."""
    op = CollectiveOp(Collective.ALL_TO_ALL, size_bytes, tuple(range(ranks)), Algorithm.DIRECT, dtype_bytes=4)
    schedule = build_schedule(op)
    mesh = socketpair_mesh(ranks, buffer_bytes)
    out, errors = {}, []

    def rank_main(rank: int) -> None:
        transport = SocketTransport(rank, mesh[rank], window_bytes=1 << 16, compiled=compiled)
        mine = schedule.for_rank(rank)
        try:
            ran = run_ops(mine, transport)
            data = DataBuffers(check.initial_buffers(op, rank))
            run_schedule(mine, transport, timeout_s=20, data=data)
            out[rank] = (ran, check.verify_buffers(op, rank, data.arrays))
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    run_ranks(rank_main, ranks, mesh)
    assert not errors, errors
    return out


@pytest.mark.parametrize("ranks, size_bytes, buffer_bytes", [
    (4, 4 * 256, None),            # small: every message goes and arrives in the optimistic pass or one wait
    (8, 8 * 64 << 10, None),       # 64 KiB per peer: several reads each
    (4, 4 * 300_000, 1 << 14),     # sends larger than the 64 KiB window through 16 KiB buffers: queued, waited
    (3, 3 * 4 << 10, 1 << 12),     # sends queued across the step into the op's flush
])
def test_compiled_exchange_moves_the_bytes_the_reference_moves(ranks, size_bytes, buffer_bytes, reference_steps):
    """Every payload-agnostic all-to-all step (and its flush) runs in the loop: the reference makes no step but
    the verified op's, and the streams end where the verified op expects them, as after the reference."""
    compiled = _alltoall(ranks, size_bytes, compiled=True, buffer_bytes=buffer_bytes)
    assert all(not problem for problem in compiled.values()), compiled
    assert len(reference_steps) <= 2 * ranks  # the verified op's step and flush, per rank
    reference_steps.clear()
    reference = _alltoall(ranks, size_bytes, compiled=False, buffer_bytes=buffer_bytes)
    assert all(not problem for problem in reference.values()), reference
    assert len(reference_steps) >= 4 * ranks  # the reference moved every op's step


def _rank_with_peers(peers: int, buffer_bytes: int | None = None, *, compiled: bool):
    """Rank 0's transport over socket pairs to `peers` peers, and each peer's far ends {peer: (reads rank 0's
    sends, writes rank 0's receives)}."""
    links, far = {}, {}
    for peer in range(1, peers + 1):
        out_near, out_far = socket.socketpair()
        in_far, in_near = socket.socketpair()
        if buffer_bytes:
            out_near.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
            out_far.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
        links[peer] = PeerLink(out_near, in_near)
        far[peer] = (out_far, in_far)
    return SocketTransport(0, links, window_bytes=1 << 16, compiled=compiled), far


def _drain(sock: socket.socket) -> int:
    total = 0
    sock.setblocking(False)
    try:
        while chunk := sock.recv(1 << 16):
            total += len(chunk)
    except BlockingIOError:
        pass
    return total


@pytest.mark.parametrize("compiled", [True, False])
def test_a_step_ends_with_its_receives_leaving_the_sends_queued_as_the_reference_does(compiled, reference_steps):
    """Receives all there, sends larger than the peers' buffers take: the step (`wait_for_sends=False`) ends once
    the receives are in, and the sends' rest waits in the outbox, in order, each at the byte the socket stopped
    taking it; the flush pushes them once the peers read, and every peer gets exactly its bytes."""
    transport, far = _rank_with_peers(3, 1 << 13, compiled=compiled)
    try:
        for peer, (_, writer) in far.items():
            writer.sendall(b"r" * (1000 * peer))
        sends = [Transfer(p, 200_000) for p in (2, 3, 1)]
        transport.exchange(sends, [Transfer(p, 1000 * p) for p in (3, 1, 2)], timeout_s=5, wait_for_sends=False)
        queued = [(peer, flow.done_bytes, flow.total_bytes) for peer, flow in transport._outbox.items()]
        assert [peer for peer, _, _ in queued] == [2, 3, 1]
        assert all(0 < done < total == 200_000 for _, done, total in queued)
        readers = [threading.Thread(target=lambda s=s: got.append(_read_exactly(s, 200_000)))
                   for s, _ in far.values()]
        got: list[int] = []
        for r in readers:
            r.start()
        transport.flush(5)
        for r in readers:
            r.join(10)
        assert got == [200_000] * 3 and not transport._outbox
        assert all(_drain(reader) == 0 for reader, _ in far.values())
        assert (len(reference_steps) == 0) == compiled
    finally:
        transport.close()


def _read_exactly(sock: socket.socket, size: int) -> int:
    total = 0
    while total < size:
        chunk = sock.recv(min(1 << 16, size - total))
        if not chunk:
            break
        total += len(chunk)
    return total


def _queued_after_steps(compiled: bool):
    """Two steps whose receives are there and whose sends do not fit: after each, the outbox's flows (the second
    step pushes the first one's further once the peers read part of them, and queues its own behind them)."""
    transport, far = _rank_with_peers(4, 1 << 13, compiled=compiled)
    queued = []
    try:
        for step in range(2):
            for peer, (reader, writer) in far.items():
                writer.sendall(b"r" * 5000)
                if step and peer < 4:
                    assert _read_exactly(reader, 3000 * peer) == 3000 * peer
            transport.exchange([Transfer(p, 100_000) for p in ((3, 1, 2), (4,))[step]],
                               [Transfer(p, 5000) for p in (1, 2, 3, 4)], timeout_s=5, wait_for_sends=False)
            queued.append([(peer, flow.pos, flow.done_bytes, flow.total_bytes, len(flow.queue))
                           for peer, flow in transport._outbox.items()])
        return queued
    finally:
        transport.close()


def test_the_sends_left_queued_are_the_reference_s_to_the_byte(reference_steps):
    compiled = _queued_after_steps(True)
    assert not reference_steps
    assert compiled == _queued_after_steps(False)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_silent_step_times_out_naming_every_message_pending(compiled):
    """Nothing arrives and a send blocks: the epoll wait times out naming what each message has done."""
    transport, far = _rank_with_peers(2, 1 << 13, compiled=compiled)
    far[2][1].sendall(b"r" * 300)
    with pytest.raises(PeerFailure, match=r"^rank 0: op timed out after 0\.3 s sending to rank 1 \((\d+)/200000 "
                                          r"bytes\), receiving from rank 1 \(0/1000 bytes\), receiving from rank 2 "
                                          r"\(300/1000 bytes\)$"):
        transport.exchange([Transfer(1, 200_000)], [Transfer(2, 1000), Transfer(1, 1000)], timeout_s=0.3)
    transport.close()


@pytest.mark.parametrize("compiled", [True, False])
def test_the_lone_receive_left_times_out_naming_its_peer_and_bytes(compiled):
    """One receive left and nothing to send: blocking reads, and the time up names that receive."""
    transport, far = _rank_with_peers(2, compiled=compiled)
    far[1][1].sendall(b"r" * 1000)
    far[2][1].sendall(b"r" * 10)
    with pytest.raises(PeerFailure, match=r"^rank 0: op timed out after 0\.2 s receiving from rank 2 "
                                          r"\(10/1000 bytes\)$"):
        transport.exchange([Transfer(1, 100), Transfer(2, 100)], [Transfer(1, 1000), Transfer(2, 1000)],
                           timeout_s=0.2)
    transport.close()


@pytest.mark.parametrize("compiled", [True, False])
def test_a_peer_that_closed_is_named_with_the_bytes_received(compiled):
    transport, far = _rank_with_peers(3, compiled=compiled)
    far[2][1].sendall(b"r" * 100)
    far[2][1].close()
    with pytest.raises(PeerFailure, match=r"^rank 0: rank 2 closed the connection \(100 of 1000 bytes received\)$") \
            as failure:
        transport.exchange([Transfer(p, 10) for p in (1, 2, 3)], [Transfer(p, 1000) for p in (3, 2)], timeout_s=5)
    assert failure.value.peer == 2
    transport.close()


@pytest.mark.parametrize("compiled", [True, False])
def test_a_send_to_a_peer_gone_is_named(compiled):
    transport, far = _rank_with_peers(2, compiled=compiled)
    far[2][0].close()  # nobody reads what rank 0 sends to rank 2
    with pytest.raises(PeerFailure, match=r"^rank 0: connection to rank 2 lost while sending") as failure:
        transport.exchange([Transfer(1, 10), Transfer(2, 10)], [Transfer(1, 10), Transfer(2, 10)], timeout_s=5)
    assert failure.value.peer == 2
    transport.close()


def test_a_step_the_loop_refuses_leaves_the_last_steps_sends_left_as_they_were():
    """`load` checks a step before it changes anything `_requeue` reads: after a step that left its sends queued,
    a refused one (two sends to one slot, more messages than peers, a size 0) leaves what the loop says is left
    of the last step's sends as it was - so the outbox rebuilt from it is the last step's, not garbage."""
    transport, far = _rank_with_peers(3, 1 << 13, compiled=True)
    try:
        for peer, (_, writer) in far.items():
            writer.sendall(b"r" * 100)
        transport.exchange([Transfer(p, 200_000) for p in (1, 2, 3)], [Transfer(p, 100) for p in (1, 2, 3)],
                           timeout_s=5, wait_for_sends=False)
        loop = transport._compiled_exchange._loop
        left = (loop.sends_left(), [loop.sent_left(i) for i in range(3)])
        assert left[0] == 3 and all(0 < x < 200_000 for x in left[1])
        for sends, recvs in (([(0, 10), (0, 10)], []), ([(0, 10)] * 4, []), ([(1, 0)], []), ([], [(5, 10)])):
            with pytest.raises(ValueError):
                loop.load(sends, recvs)
            assert (loop.sends_left(), [loop.sent_left(i) for i in range(3)]) == left
        with pytest.raises(ValueError):
            loop.run_ops([0, 1, 2, 0], 1, 5.0)  # more bulk sends than peers: nothing began (no op's sends)
        assert loop.sends_left() == 0
    finally:
        transport.close()


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("when", ["watch", "unwatch"])
def test_an_epoll_set_that_lost_a_socket_fails_the_step_as_the_reference_does(compiled, when, reference_steps):
    """`epoll_ctl` failing (the send socket no longer in the transport's epoll set: ENOENT) raises what
    `select.epoll.modify` raises in the reference - when the wait starts watching a blocked send, or when it
    stops (the step done), the latter in place of the step's own outcome."""
    transport, far = _rank_with_peers(2, 1 << 13, compiled=compiled)
    fd = transport._links[1].send.fileno()
    try:
        if when == "watch":
            transport._epoll.unregister(fd)
        else:
            def lose_then_feed() -> None:
                time.sleep(0.1)
                transport._epoll.unregister(fd)
                far[2][1].sendall(b"r" * 1000)

            threading.Thread(target=lose_then_feed).start()
        with pytest.raises(FileNotFoundError):
            transport.exchange([Transfer(1, 200_000)], [Transfer(2, 1000)], timeout_s=2, wait_for_sends=False)
        assert (len(reference_steps) == 0) == compiled
    finally:
        transport.close()


def test_a_signal_during_the_wait_runs_its_handler_and_the_step_goes_on():
    """SIGALRM while the loop waits without the GIL: the handler runs (as CPython runs it on EINTR) and the step
    completes once the data comes; a handler that raises ends the step with its exception, and the next step
    runs as usual."""
    transport, far = _rank_with_peers(2, compiled=True)
    calls = []
    waiter = threading.get_ident()

    def alarm_soon() -> threading.Timer:  # to this thread: a process-wide timer may land on another thread
        timer = threading.Timer(0.05, signal.pthread_kill, (waiter, signal.SIGALRM))
        timer.start()
        return timer

    previous = signal.signal(signal.SIGALRM, lambda *_: calls.append(time.monotonic()))
    try:
        def late() -> None:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # the signal is the waiting thread's
            time.sleep(0.3)
            for _, writer in far.values():
                writer.sendall(b"r" * 1000)

        feeder = threading.Thread(target=late)
        feeder.start()
        alarm_soon()
        transport.exchange([], [Transfer(1, 1000), Transfer(2, 1000)], timeout_s=5)
        feeder.join()
        assert len(calls) == 1

        def stop(*_):
            raise KeyboardInterrupt

        signal.signal(signal.SIGALRM, stop)
        alarm_soon()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            transport.exchange([], [Transfer(1, 1000), Transfer(2, 1000)], timeout_s=5)
        assert time.monotonic() - started < 4  # the wait was interrupted, not timed out
        for _, writer in far.values():
            writer.sendall(b"r" * 1000)
        transport.exchange([], [Transfer(1, 1000), Transfer(2, 1000)], timeout_s=5)
    finally:
        signal.signal(signal.SIGALRM, previous)
        transport.close()


def test_steps_not_of_its_shape_stay_on_the_reference(reference_steps):
    """Real data (a view), two transfers to one peer, or a spinning transport: the reference moves the step."""
    transport, far = _rank_with_peers(2, compiled=True)
    try:
        for _, writer in far.values():
            writer.sendall(b"r" * 40)
        landing = bytearray(10)
        transport.exchange([], [Transfer(1, 10, memoryview(landing)), Transfer(2, 10)], timeout_s=5)
        transport.exchange([Transfer(1, 5), Transfer(1, 5)], [Transfer(1, 10), Transfer(2, 10)], timeout_s=5)
        transport.spin_s = 1e-4
        transport.exchange([], [Transfer(1, 10), Transfer(2, 10)], timeout_s=5)
        assert len(reference_steps) == 3
        transport.spin_s = 0.0
        transport.exchange([], [Transfer(1, 10), Transfer(2, 10)], timeout_s=5)
        assert len(reference_steps) == 3
    finally:
        transport.close()


def _alltoall_ops(ranks: int, size_bytes: int, ops: int, *, compiled: bool = True,
                  buffer_bytes: int | None = None, timeout_s: float = 20):
    """`ops` timed all-to-alls back to back (`run_timed_ops`, as the bench's timed loop), then one verified op on
    the same connections. Returns {rank: (spans or None, verification problem)}."""
    def timed(mine, transport):
        return run_timed_ops(mine, transport, transfer_plan(mine), ops, timeout_s=timeout_s)

    return _alltoall_runs(ranks, size_bytes, timed, compiled=compiled, buffer_bytes=buffer_bytes)


@pytest.mark.parametrize("ranks, size_bytes, buffer_bytes", [
    (4, 4 * 256, None),
    (8, 8 * 128 << 10, None),      # 128 KiB per peer, over the flush's bulk size: it waits for TCP (socket pairs: 0)
    (4, 4 * 300_000, 1 << 14),     # sends queued into the flush
])
def test_whole_all_to_alls_back_to_back_move_the_bytes(ranks, size_bytes, buffer_bytes, reference_steps):
    """The bench's timed all-to-alls run in the exchange's op loop: one span per op, in order, no step left to
    the reference, and the streams where the verified op after them expects them."""
    done = _alltoall_ops(ranks, size_bytes, 5, buffer_bytes=buffer_bytes)
    assert len(reference_steps) <= 2 * ranks  # the verified op's step and flush only
    for rank, (spans, problem) in done.items():
        assert not problem, problem
        assert spans is not None and len(spans) == 5
        assert all(start <= end for start, end in spans)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_without_the_compiled_exchange_the_caller_runs_the_ops():
    for rank, (spans, problem) in _alltoall_ops(4, 4 * 256, 3, compiled=False).items():
        assert spans is None and not problem


@pytest.mark.parametrize("refused", ["a view", "two transfers to one peer"])
def test_a_one_step_plan_the_exchange_loop_refuses_is_left_to_the_caller(refused, reference_steps):
    """Built, but not the loop's shape (real data, or several transfers to one peer in its step): `run_timed_ops`
    returns None at once - nothing sent, nothing received, no step moved - and the caller runs the ops one by
    one."""
    op = CollectiveOp(Collective.ALL_TO_ALL, 3 * 256, tuple(range(3)), Algorithm.DIRECT, dtype_bytes=4)
    mine = build_schedule(op).for_rank(0)
    transport, far = _rank_with_peers(2, compiled=True)
    try:
        sends = [Transfer(1, 256), Transfer(2, 256)]
        if refused == "a view":
            sends[0] = Transfer(1, 256, memoryview(bytearray(256)))
        else:
            sends.append(Transfer(1, 16))
        plan = [(sends, [Transfer(1, 256), Transfer(2, 256)])]
        assert transport._compiled_exchange is not None
        assert run_timed_ops(mine, transport, plan, 3, timeout_s=1) is None
        assert not transport._outbox and not reference_steps
        assert all(_drain(reader) == 0 for reader, _ in far.values())  # nothing sent
    finally:
        transport.close()


@pytest.mark.parametrize("timeout_s, message", [
    (0.0, r"^rank 0: op timed out after 0 s at step 0$"),
    (0.3, r"^rank 0: op timed out after 0\.\d+ s receiving from rank 1 \(0/256 bytes\), receiving from rank 2 "
          r"\(0/256 bytes\), receiving from rank 3 \(0/256 bytes\)$"),
])
@pytest.mark.parametrize("compiled", [True, False])
def test_whole_ops_fail_as_the_reference_fails(timeout_s, message, compiled):
    """A silent mesh: the op loop raises what the reference's `run_schedule` raises."""
    op = CollectiveOp(Collective.ALL_TO_ALL, 4 * 256, tuple(range(4)), Algorithm.DIRECT, dtype_bytes=4)
    mine = build_schedule(op).for_rank(0)
    mesh = socketpair_mesh(4)  # the peers' ends stay open and silent
    transport = SocketTransport(0, mesh[0], compiled=compiled)
    plan = transfer_plan(mine)
    with pytest.raises(RunFailure, match=message):
        if run_timed_ops(mine, transport, plan, 3, timeout_s=timeout_s) is None:
            run_schedule(mine, transport, timeout_s=timeout_s, plan=plan)
    transport.close()
    for peers in mesh[1:]:
        for link in peers.values():
            link.close()


def test_a_peer_gone_mid_ops_is_named():
    """Rank 2 closes its end after the first op: the op loop names it as the reference does."""
    op = CollectiveOp(Collective.ALL_TO_ALL, 3 * 256, tuple(range(3)), Algorithm.DIRECT, dtype_bytes=4)
    schedule = build_schedule(op)
    mesh = socketpair_mesh(3)
    errors: dict = {}

    def rank_main(rank: int) -> None:
        transport = SocketTransport(rank, mesh[rank])
        mine = schedule.for_rank(rank)
        try:
            run_timed_ops(mine, transport, transfer_plan(mine), 1 if rank == 2 else 50, timeout_s=5)
            if rank == 2:
                transport.close()
        except Exception as exc:
            errors[rank] = exc

    run_ranks(rank_main, 3, mesh)
    assert set(errors) == {0, 1}
    assert all(isinstance(e, PeerFailure) and e.peer == 2 for e in errors.values()), errors
