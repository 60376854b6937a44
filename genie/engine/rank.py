"""The rank program: one process per GPU rank. Run as ``python -m genie.engine.rank --control SOCK --rank R
--address A`` inside the rank's host namespace.

Life (`serve_rank`, messages of `genie.core.protocol`): listen on A → `Hello` to the orchestrator (port) →
`Setup` (the address book and the job) → persistent TCP connections with each peer the job needs, one per
direction (`genie.engine.links.PeerLink`) → run the job, reporting a `CaseResult` per case → `Done` →
wait for `Exit`. Any failure is reported as one `Error` naming this rank (and the peer) before the process
exits.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from typing import Any, Protocol, Sequence

from genie.core.congestion import CongestionControl
from genie.core.errors import RunFailure
from genie.core.process import own_status_field
from genie.core.protocol import (Barrier, BenchJob, CasePhase, CaseResult, Done, Error, Go, Hello, Job, Message,
                                 ReplayJob, Setup, Straggler)
from genie.engine.control import ControlClosed, recv_message, send_message
from genie.engine.time_slice import request_time_slice
from genie.engine.links import connect_mesh, flow_tuples, listen_socket
from genie.engine.transport import SocketTransport, Transport


def peak_rss_kb() -> int:
    """This process's peak resident memory (VmHWM, KiB; 0 when unknown). Not getrusage's ru_maxrss: Linux keeps
    that across exec, so a rank started by a fork of the genie command would report the command's memory."""
    return int(own_status_field("VmHWM") or 0)


class Control(Protocol):
    """What the job runners need from a control plane: the orchestrator's unix socket (`ControlChannel`) or MPI
    (`genie.engine.mpi.control.MpiControl`)."""

    def send(self, message: Message) -> None: ...

    def barrier(self, barrier: Barrier = Barrier()) -> int:
        """Wait for every rank and a common start time; return it on this rank's monotonic clock (ns).
        `barrier` tells the orchestrator about it (timed ops follow, a fault point); MPI control ignores it."""


class ControlChannel:
    """The rank's end of a control connection (a unix socket to the orchestrator, or one end of a socketpair)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, message: Message) -> None:
        send_message(self.sock, message)

    def receive(self) -> Message:
        return recv_message(self.sock)

    def barrier(self, barrier: Barrier = Barrier()) -> int:
        """Wait for every rank, then for the common start time the orchestrator sets; returns it (ns). `barrier`
        tells the orchestrator about it: ``timed`` (timed ops follow), ``fault_point=k`` (timed op k follows:
        faults planned for it are injected before the ranks are released)."""
        from genie.engine.clock import sleep_until

        send_message(self.sock, barrier)
        reply = recv_message(self.sock)
        if not isinstance(reply, Go):
            raise RunFailure(f"unexpected control message {reply.kind.value!r} during barrier")
        start_ns = reply.start_ns or time.monotonic_ns()
        sleep_until(start_ns)
        return start_ns


def job_peers(job: BenchJob, rank: int) -> frozenset[int]:
    from genie.collectives.registry import build_schedule

    peers: set[int] = set()
    for case in job.cases:
        if rank in case.op.group:
            peers |= build_schedule(case.op).peers_of(rank)
    return frozenset(peers)


def run_bench_job(job: BenchJob, rank: int, transport: Transport, control: Control) -> None:
    """For each case: barrier, warmup (as the timed iterations run: no real data), barrier, timed iterations,
    then, with `job.verify`, one untimed check iteration with real data (nccl-tests' -c, which checks after its
    timed loop: real data's work does not run just before the timed iterations), barrier; report per-iteration
    start/end (ns). Before a timed op that is a fault point (`job.fault_points`, counted over the whole sweep)
    every rank waits at one more barrier while the orchestrator injects; that iteration is then timed from its
    own start."""
    from genie.collectives.registry import build_schedule
    from genie.engine.executor import run_schedule, run_timed_ops, transfer_plan
    from genie.engine.program import clear_to_send

    clock = time.monotonic_ns
    points = set(job.fault_points)
    op = 0
    for index, case in enumerate(job.cases):
        member = rank in case.op.group
        schedule = build_schedule(case.op).for_rank(rank) if member else None
        plan = transfer_plan(schedule) if member else None
        tokens = clear_to_send(case.op, rank) if member and case.op.sends_messages else None
        verifier = _Verifier(case.op, rank) if (job.verify and member) else None
        control.barrier(Barrier(case=index, phase=CasePhase.WARMUP))
        for _ in range(case.warmup if member else 0):
            run_schedule(schedule, transport, timeout_s=job.timeout_s, clear_to_send=tokens, plan=plan)
        control.barrier(Barrier(timed=job.faults, case=index, phase=CasePhase.TIMED))
        iterations: list[tuple[int, int]] = []
        steps: list[tuple[Any, ...]] = []
        restarts: list[int] = []
        # no fault point, step record or token among this case's ops: back to back in the compiled loop
        whole = None
        if member and tokens is None and not job.record_steps and not any(op <= p < op + case.iterations
                                                                          for p in points):
            whole = run_timed_ops(schedule, transport, plan, case.iterations, timeout_s=job.timeout_s)
        if whole is not None:
            op += case.iterations
            iterations = whole
        for it in range(case.iterations if whole is None else 0):
            op += 1
            if op - 1 in points:  # the iterations so far go along: kept if a fault ends the run in this case
                control.barrier(Barrier(fault_point=op - 1, case=index, iterations=tuple(iterations),
                                        restarts=tuple(restarts)))
                restarts.append(it)
            if not member:
                continue
            start = clock()
            records = run_schedule(schedule, transport, timeout_s=job.timeout_s,
                                   record_steps=job.record_steps, clock=clock, clear_to_send=tokens, plan=plan)
            end = clock()
            iterations.append((start, end))
            steps.extend((it, r.step_index, r.start_ns, r.end_ns, r.sent_bytes, r.received_bytes, tuple(r.peers))
                         for r in records)
        if job.verify:  # nccl-tests' check iteration (-c), after the timed loop as there: real data, checked;
            # every rank done with its last timed iteration first (the check's copies and reductions would take
            # the CPU of a rank still in it), and the case's timed CPU window closes here
            control.barrier(Barrier(case=index, phase=CasePhase.CHECK))
        if verifier:
            data = verifier.fresh()
            run_schedule(schedule, transport, timeout_s=job.timeout_s, data=data, clear_to_send=tokens)
            verifier.check(data)
        # report once every rank is done with the case: a rank that reports while others still run its last
        # iteration takes their CPU (on the 2-core VM the last of 12 timed 12 MiB all-to-alls ran 107-116 ms
        # against ~96, every run; with the barrier 95.5-96.9; benchmarks/README.md)
        control.barrier(Barrier(case=index, phase=CasePhase.END))
        control.send(CaseResult(case=index, rank=rank, iterations=tuple(iterations), steps=tuple(steps),
                                restarts=tuple(restarts)))


def compute_factor(stragglers: Sequence[Straggler], op: int, run_t0_ns: int):
    """How much longer this rank's compute lasts in timed op `op` (None: not at all). ``at_op`` stragglers
    stretch every compute node from that op on; ``at_s`` ones every compute node whose (ideal) start is at or
    after the run clock's `at_s` (zero: the first timed start)."""
    base = 1.0
    timed: list[tuple[int, float]] = []
    for s in stragglers:
        if s.at_op is not None:
            if op >= s.at_op:
                base *= s.factor
        else:
            timed.append((run_t0_ns + round((s.at_s or 0.0) * 1e9), s.factor))
    if not timed:
        return None if base == 1.0 else (lambda _start_ns: base)

    def factor(start_ns: int) -> float:
        out = base
        for from_ns, f in timed:
            if start_ns >= from_ns:
                out *= f
        return out

    return factor


def run_replay_job(job: ReplayJob, mover, control: Control) -> None:
    """Walk the program `warmup + iterations` times, each after a barrier; report each timed iteration.
    `mover` (a `genie.engine.walker.StepMover`) moves the bytes; the walker closes it. With faults, timed
    barriers are tagged (``timed``, ``fault_point``: timed iteration k is op k) and this rank's stragglers
    (`job.stragglers`) stretch its compute."""
    from genie.engine.walker import ProgramWalker

    program = job.program
    walker = ProgramWalker(program, mover, timeout_s=job.timeout_s, spin_ns=job.spin_ns)
    points = set(job.fault_points)
    stragglers = job.stragglers
    run_t0: int | None = None
    try:
        warmup = job.warmup
        for it in range(warmup + job.iterations):
            op = it - warmup
            t0 = control.barrier(Barrier(timed=job.faults and op >= 0, fault_point=op if op in points else None))
            if op == 0:
                run_t0 = t0
            factor = compute_factor(stragglers, op, run_t0) if stragglers and run_t0 is not None else None
            records = walker.run(t0, compute_factor=factor)
            if it >= warmup:
                control.send(CaseResult(case=it - warmup, rank=program.rank, t0_ns=t0,
                                        records=tuple((r.node_id, r.start_ns, r.end_ns) for r in records)))
    finally:
        walker.close()


class _Verifier:
    """Real data for --verify: fresh deterministic inputs per iteration, exact check of the result."""

    def __init__(self, op, rank: int) -> None:
        from genie.collectives import check

        self.op = op
        self.rank = rank
        self._check = check
        self._initial = check.initial_buffers(op, rank)

    def fresh(self):
        from genie.engine.executor import DataBuffers

        return DataBuffers({b: a.copy() for b, a in self._initial.items()})

    def check(self, data) -> None:
        problem = self._check.verify_buffers(self.op, self.rank, data.arrays)
        if problem:
            raise RunFailure(f"--verify failed for {self.op.collective.value} {self.op.size_bytes} B "
                             f"({self.op.algorithm.value}): {problem}")


def run_job_over_tcp(job: Job, rank: int, listener: socket.socket, addresses: dict[int, tuple[str, int]],
                     control: Control, links: dict, *, connect_timeout_s: float | None = None,
                     socket_buffer_bytes: int | None = None, spin_s: float = 0.0,
                     congestion: CongestionControl = CongestionControl.CUBIC) -> SocketTransport | None:
    """Connect to the peers the job needs (a `PeerLink` per (channel, peer)), close `listener`, run the job
    (bench or replay), every connection with `congestion`. The connections land in `links`, and the bench
    transport is returned: the caller
    closes them (also on failure) once every rank is done. Connecting may take the job's op timeout unless
    `connect_timeout_s` says otherwise."""
    match job:
        case ReplayJob():
            wanted = job.program.links
        case BenchJob():
            wanted = frozenset((0, peer) for peer in job_peers(job, rank))
        case _:
            raise RunFailure(f"rank {rank}: cannot run a {type(job).__name__}")
    timeout_s = job.timeout_s if connect_timeout_s is None else connect_timeout_s
    links.update(connect_mesh(rank, listener, addresses, wanted, timeout_s=timeout_s,
                              buffer_bytes=socket_buffer_bytes, congestion=congestion))
    listener.close()
    if isinstance(job, ReplayJob):
        from genie.engine.socket_mover import SocketMover

        run_replay_job(job, SocketMover(rank, links), control)
        return None
    transport = SocketTransport(rank, {peer: link for (_, peer), link in links.items()}, spin_s=spin_s)
    try:
        run_bench_job(job, rank, transport, control)
    except BaseException:
        transport.close()
        raise
    return transport


def serve_rank(control: ControlChannel, rank: int, listener: socket.socket, links: dict) -> int:
    """One rank's life on a control channel, whatever started it (a process, a thread): hello → setup → the
    job → done → wait for exit. A failure is reported to the orchestrator (`Error`, naming this rank). The
    data connections land in `links`; this closes them, the transport and `listener` before returning the
    exit code (0, 1: failed, 3: the orchestrator went away)."""
    transport: SocketTransport | None = None
    try:
        control.send(Hello(rank=rank, port=listener.getsockname()[1], pid=os.getpid()))
        setup = control.receive()
        if not isinstance(setup, Setup):
            raise RunFailure(f"rank {rank}: expected the setup, got a {setup.kind.value} message")
        transport = run_job_over_tcp(setup.job, rank, listener, setup.addresses, control, links,
                                     connect_timeout_s=setup.connect_timeout_s,
                                     socket_buffer_bytes=setup.socket_buffer_bytes, spin_s=setup.spin_s,
                                     congestion=setup.congestion_control)
        control.send(Done(rank=rank, peak_rss_kb=peak_rss_kb(), flows=flow_tuples(rank, links)))
        control.receive()  # `Exit`: every rank is done, connections may close
        return 0
    except ControlClosed:
        return 3
    except Exception as exc:  # reported to the orchestrator, which names this rank
        message = str(exc) if isinstance(exc, RunFailure) else f"rank {rank}: {type(exc).__name__}: {exc}"
        try:
            control.send(Error(rank=rank, message=message))
        except OSError:
            pass
        return 1
    finally:
        listener.close()
        if transport is not None:
            transport.close()
        for link in links.values():
            link.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="genie-rank")
    parser.add_argument("--control", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--address", required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    request_time_slice()  # woken from a receive, a rank runs soon and briefly (genie.engine.time_slice)

    ctrl_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ctrl_sock.connect(args.control)
    control = ControlChannel(ctrl_sock)
    try:
        listener = listen_socket(args.address)
    except OSError as exc:
        try:
            control.send(Error(rank=args.rank, message=f"rank {args.rank}: {type(exc).__name__}: {exc}"))
        except OSError:
            pass
        return 1
    return serve_rank(control, args.rank, listener, {})


if __name__ == "__main__":
    sys.exit(main())
