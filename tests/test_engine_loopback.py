"""The replay engine without root: schedules executed over socket pairs in threads, and whole bench runs with
rank processes on 127.0.0.1 (the same rank program that runs inside testbed namespaces)."""

import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from cli_support import run_genie
from engine_support import run_ranks
from genie.collectives import check
from genie.collectives.registry import build_schedule, supported_algorithms
from genie.core.collective import Algorithm, Collective
from genie.core.congestion import CongestionControl
from genie.core.errors import RunFailure
from genie.core.schedule import CollectiveOp
from genie.services.bench import BenchRequest, run_bench
from genie.services.target import loopback_placements
from genie.engine.executor import DataBuffers, run_schedule
from genie.engine.links import socketpair_mesh
from genie.engine.transport import PeerFailure, SocketTransport, Transfer

ALL_CASES = [(c, a) for c in Collective for a in supported_algorithms(c)]


def _run_threads(op: CollectiveOp, verify: bool = True, record_steps: bool = False,
                 send_buffer_bytes: int | None = None):
    schedule = build_schedule(op)
    mesh = socketpair_mesh(len(op.group), send_buffer_bytes)
    results, errors = {}, []

    def rank_main(pos: int) -> None:
        rank = op.group[pos]
        transport = SocketTransport(rank, mesh[pos])
        data = DataBuffers(check.initial_buffers(op, rank)) if verify else None
        try:
            records = run_schedule(schedule.for_rank(rank), transport, timeout_s=20, data=data,
                                   record_steps=record_steps)
            results[rank] = (data, records)
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    run_ranks(rank_main, len(op.group), mesh)
    assert not errors, errors
    return schedule, results


@pytest.mark.parametrize("collective,algorithm", ALL_CASES, ids=lambda v: getattr(v, "value", v))
@pytest.mark.parametrize("n,size", [(2, 4096), (3, 1000), (5, 65536), (8, 1 << 18)])
def test_schedule_moves_correct_data_over_sockets(collective, algorithm, n, size):
    group = tuple(range(n))
    op = CollectiveOp(collective, size // (4 * n) * 4 * n or 4 * n, group, algorithm,
                      root=0, peer=n - 1 if collective is Collective.SEND_RECV else None)
    _, results = _run_threads(op)
    for rank, (data, _) in results.items():
        assert check.verify_buffers(op, rank, data.arrays) is None


@pytest.mark.parametrize("collective,algorithm", ALL_CASES, ids=lambda v: getattr(v, "value", v))
@pytest.mark.parametrize("n", [2, 3, 4])
def test_queued_sends_never_see_later_writes(collective, algorithm, n):
    """A step starts once the previous receives are done, while earlier sends may still be queued: with
    socket buffers far smaller than a step, every reduction or receive that would overwrite a region still
    being sent must wait for it, or the verified data would be wrong."""
    op = CollectiveOp(collective, 4 * n * 8192, tuple(range(n)), algorithm,
                      root=0, peer=n - 1 if collective is Collective.SEND_RECV else None)
    _, results = _run_threads(op, send_buffer_bytes=2048)
    for rank, (data, _) in results.items():
        assert check.verify_buffers(op, rank, data.arrays) is None


def test_executor_leaves_sends_queued_between_steps_but_not_after_the_op():
    """Ring steps proceed on received data while the previous send is still queued; the op ends only when
    every send is out (the outbox is empty)."""
    op = CollectiveOp(Collective.ALL_GATHER, 4 * 4 * 65536, tuple(range(4)), Algorithm.RING)
    schedule = build_schedule(op)
    mesh = socketpair_mesh(4)
    for peers in mesh:
        for link in peers.values():
            link.send.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    transports = [SocketTransport(r, mesh[r]) for r in range(4)]
    queued_during: list[int] = []
    left_after: list[int] = []

    class Watching:
        def __init__(self, t):
            self.t, self.rank = t, t.rank

        def exchange(self, sends, recvs, timeout_s, *, wait_for_sends=True):
            self.t.exchange(sends, recvs, timeout_s, wait_for_sends=wait_for_sends)
            queued_during.append(len(self.t._outbox))

        def flush(self, timeout_s):
            self.t.flush(timeout_s)
            left_after.append(len(self.t._outbox))

    threads = [threading.Thread(target=run_schedule, args=(schedule.for_rank(r), Watching(transports[r])),
                                kwargs={"timeout_s": 20}) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for t in transports:
        t.close()
    assert left_after == [0, 0, 0, 0]
    assert any(queued_during)


@pytest.mark.parametrize("congestion", list(CongestionControl))
def test_tcp_connections_use_the_pinned_congestion_control(congestion: CongestionControl):
    from genie.engine.links import connect_mesh, listen_socket

    available = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    if congestion.value not in available:
        pytest.skip(f"{congestion.value} is not available on this kernel")
    if os.geteuid() != 0 and congestion.value not in \
            open("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read().split():
        pytest.skip("choosing a congestion control outside the allowed list needs root")
    listeners = [listen_socket("127.0.0.1") for _ in range(2)]
    addresses = {r: l.getsockname() for r, l in enumerate(listeners)}
    meshes = [None, None]

    def side(r):
        meshes[r] = connect_mesh(r, listeners[r], addresses, frozenset({(0, 1 - r)}), timeout_s=10,
                                 congestion=congestion)

    threads = [threading.Thread(target=side, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    try:
        for mesh in meshes:
            (link,) = mesh.values()
            assert link.send is not link.recv  # a connection per direction
            for sock in link.sockets():
                algo = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0")
                assert algo == congestion.value.encode()
    finally:
        for mesh in meshes:
            for link in (mesh or {}).values():
                link.close()
        for l in listeners:
            l.close()


def test_step_records_account_every_byte():
    op = CollectiveOp(Collective.ALL_REDUCE, 1 << 16, tuple(range(4)), Algorithm.RING)
    schedule, results = _run_threads(op, verify=False, record_steps=True)
    for rank, (_, records) in results.items():
        assert len(records) == 2 * (4 - 1)
        assert sum(r.sent_bytes for r in records) == schedule.for_rank(rank).sent_bytes == 2 * 3 * (1 << 16) // 4
        assert all(r.end_ns >= r.start_ns for r in records)


def test_silent_peer_times_out_naming_rank_and_peer():
    mesh = socketpair_mesh(2)
    t = SocketTransport(0, mesh[0])
    started = time.monotonic()
    with pytest.raises(PeerFailure, match=r"rank 0: op timed out .* receiving from rank 1 \(0/100 bytes\)"):
        t.exchange([], [Transfer(1, 100)], timeout_s=0.3)
    assert time.monotonic() - started < 3


def test_closed_peer_is_named():
    mesh = socketpair_mesh(2)
    mesh[1][0].close()
    with pytest.raises(PeerFailure, match="rank 1 closed the connection"):
        SocketTransport(0, mesh[0]).exchange([], [Transfer(1, 10)], timeout_s=5)


def test_bench_over_loopback_processes_with_verify():
    request = BenchRequest(collectives=(Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.ALL_TO_ALL),
                           min_bytes=1024, max_bytes=1 << 16, factor=8, iterations=3, warmup=1, verify=True)
    progress = []
    outcome = run_bench(request, loopback_placements(3), progress=lambda d, t, s: progress.append((d, t)))
    split = [1020, 8184, 65532]  # rounded down to a multiple of 3 ranks x 4 bytes, as nccl-tests does
    assert [(s.collective, s.size_bytes) for s in outcome.stats] == (
        [(Collective.ALL_REDUCE, s) for s in (1024, 8192, 65536)]
        + [(Collective.ALL_GATHER, s) for s in split] + [(Collective.ALL_TO_ALL, s) for s in split])
    assert progress[-1] == (9, 9)
    for s in outcome.stats:
        assert s.iterations == 3 and s.time_median_us > 0 and s.busbw_GBps > 0


def _children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def test_killed_rank_fails_the_run_fast_and_leaves_no_process():
    pids: list[int] = []

    def kill_one_later(p: list[int]) -> None:
        pids.extend(p)
        threading.Timer(1.5, lambda: os.kill(p[1], signal.SIGKILL)).start()

    request = BenchRequest(collectives=(Collective.ALL_REDUCE,), min_bytes=1 << 20, max_bytes=1 << 20,
                           iterations=100000, warmup=0, timeout_s=10)
    started = time.monotonic()
    with pytest.raises(RunFailure, match=r"rank 1 .*(exited with code -9|killed)|rank 1 closed the connection"
                                          r"|connection to rank 1 lost"):
        run_bench(request, loopback_placements(3), on_pids=kill_one_later)
    assert time.monotonic() - started < 30
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert _children_of(os.getpid()) == [] or all(
        p not in pids for p in _children_of(os.getpid()))


def test_cli_bench_loopback_writes_reports(tmp_path):
    out = tmp_path / "run"
    proc = run_genie("bench", "--loopback", "--ranks", "2", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "-w", "0",
                     "--steps", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "# Collective test starting: all_reduce_perf" in proc.stdout  # nccl-tests layout (issue #17)
    assert {"sweep.csv", "sweep.json", "steps.csv"} <= {p.name for p in out.iterdir()}
    assert len((out / "sweep.csv").read_text().splitlines()) == 3


@pytest.mark.parametrize("args,needle", [
    (["-b", "1X"], "--minbytes"), (["--collective", "allfoo"], "unknown collective"),
    (["--algorithm", "direct"], "--algorithm"), (["-n", "0"], "--iterations"), ([], "exactly one of"),
])
def test_cli_bench_bad_input_is_one_line_exit_2(args, needle):
    base = ["--loopback", "--ranks", "2"] if args else []
    proc = run_genie("bench", *base, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr


def test_tcp_receive_connections_delay_their_acks_and_keep_doing_so():
    """A connection that only receives is put in delayed-ACK mode (TCP_QUICKACK=0 reads back 0) and is put
    back after each small receive: Linux leaves the mode whenever a delayed ACK's timer fires. The send
    connections keep the kernel's default."""
    from genie.engine.transport import PeerLink

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    out = socket.create_connection(listener.getsockname())
    into, _ = listener.accept()
    back = socket.create_connection(listener.getsockname())
    back_in, _ = listener.accept()
    transport = SocketTransport(0, {1: PeerLink(back, into)})

    def quickack(sock):
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)

    try:
        assert quickack(into) == 0 and quickack(back) == 1
        into.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)  # as when the delayed-ACK timer fires
        out.sendall(b"x" * 8)
        transport.exchange([Transfer(1, 16)], [Transfer(1, 8)], timeout_s=5)
        assert quickack(into) == 0
        assert len(back_in.recv(64)) > 0  # the send went out
    finally:
        transport.close()
        for s in (out, back_in, listener):
            s.close()


def test_socket_pairs_are_left_alone():
    from genie.engine.links import delay_acks

    a, b = socket.socketpair()
    try:
        assert delay_acks(a) is None
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("algorithm", [Algorithm.RECURSIVE_DOUBLING, Algorithm.RING])
def test_ops_without_data_leave_the_streams_where_ops_with_data_expect_them(algorithm):
    """Payload-agnostic ops (the lean one-send-one-receive path) between verified ones (the general path) on
    the same connections: the verified results are exact only if every op moved exactly its bytes."""
    op = CollectiveOp(Collective.ALL_REDUCE, 4 * 4 * 64, tuple(range(4)), algorithm)
    schedule = build_schedule(op)
    mesh = socketpair_mesh(4)
    errors, checked = [], []

    def rank_main(rank: int) -> None:
        transport = SocketTransport(rank, mesh[rank])
        mine = schedule.for_rank(rank)
        try:
            for round_ in range(3):
                for _ in range(5):
                    run_schedule(mine, transport, timeout_s=20)
                data = DataBuffers(check.initial_buffers(op, rank))
                run_schedule(mine, transport, timeout_s=20, data=data)
                problem = check.verify_buffers(op, rank, data.arrays)
                assert not problem, problem
                checked.append((rank, round_))
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    run_ranks(rank_main, 4, mesh)
    assert not errors, errors
    assert len(checked) == 4 * 3
