"""The rank program under MPI: ``python -m genie.engine.mpi.rank --map-json MAP --transport tcp|mpi``, started
by mpiexec (through the trampoline on namespace testbeds). See docs/mpi.md.

Life of a rank:
1. before MPI starts: find its place in the launch map (the launcher's rank variable), choose its listen
   address (the placement's, or on a real host the inventory's traffic address), and point MPICH's TCP
   netmod at the interface holding it (FI_TCP_IFACE / UCX_NET_DEVICES, unless set);
2. MPI_Init (importing mpi4py), check the world size against the map;
3. rank 0 reads the job from stdin and scatters it; clock offsets against rank 0 (ping-pongs);
4. ``--transport tcp``: a listener (in ``--port-range`` if given), addresses allgathered, genie's TCP mesh;
   ``--transport mpi``: MPI point-to-point on a duplicate of COMM_WORLD (bench: `MpiTransport`, replay: the
   walker with an `MpiMover`);
5. the job runs with `genie.engine.rank`'s runners and an `MpiControl` (barriers with a common start time,
   results gathered to rank 0, which writes them to the orchestrator line by line);
6. any failure: one ``@genie-mpi-error`` line on stderr naming the rank and its host, then MPI_Abort (hydra
   stops every rank).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

from genie.core.congestion import CongestionControl
from genie.core.errors import EnvironmentProblem, GenieError, RunFailure
from genie.core.process import die_with_parent
from genie.core.protocol import BenchJob, Job, ReplayJob, job_from_json
from genie.engine.mpi.plan import ERROR_MARKER, LaunchMap, Transport, parse_port_range, port_candidates
from genie.engine.mpi.trampoline import RANK_VARIABLES, launcher_rank
from genie.engine.transport import PeerFailure


def boot_id() -> str:
    """Identifies the running kernel, hence the CLOCK_MONOTONIC this process reads."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return f"unknown-{os.getpid()}"


def choose_address(launch: LaunchMap, rank: int, local: list[tuple[str, str]]) -> tuple[str, str]:
    """(listen address, interface holding it) of `rank` on this machine."""
    from genie.engine.mpi.netif import interface_of
    from genie.inventory.placement import traffic_address

    host = launch.host_of(rank)
    if host.interface is not None or host.subnet is not None:
        address = traffic_address(host.inventory_host(), local)
    else:
        address = resolve_own_name(launch.addresses[rank], multi_host=len(launch.hosts) > 1)
    iface = interface_of(address, local)
    if iface is None:
        seen = ", ".join(f"{name} {cidr}" for name, cidr in local) or "none"
        raise EnvironmentProblem(f"address {address} is not on this machine (it has: {seen})")
    return address, iface


def resolve_own_name(address: str, *, multi_host: bool) -> str:
    """An inventory address that is a host name (a Slurm node name) resolved here to the IPv4 address to
    listen on; a loopback answer (Debian maps a machine's own name to 127.0.1.1) is useless to other hosts."""
    import ipaddress
    import socket

    try:
        ipaddress.IPv4Address(address)
        return address
    except ValueError:
        pass
    try:
        resolved = socket.gethostbyname(address)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot resolve host name {address!r} ({exc.strerror or exc}); give the "
                                 "inventory an address, interface or subnet") from None
    if multi_host and ipaddress.IPv4Address(resolved).is_loopback:
        raise EnvironmentProblem(f"host name {address!r} resolves to {resolved} here, which other hosts cannot "
                                 "reach; give the inventory an interface or subnet for genie traffic")
    return resolved


def point_mpi_at(iface: str, env: dict[str, str] | Any = os.environ) -> None:
    """Keep MPICH's own traffic on the interface genie listens on (the user's settings win)."""
    env.setdefault("FI_TCP_IFACE", iface)
    env.setdefault("UCX_NET_DEVICES", iface)


def failure_message(rank: int | None, host: str | None, exc: BaseException) -> str:
    """One line naming the rank and its host: ``rank 3 on host h3: ...``."""
    detail = str(exc) if isinstance(exc, GenieError) else f"{type(exc).__name__}: {exc}"
    detail = " ".join(detail.split())
    who = "a rank" if rank is None else f"rank {rank}"
    for prefix in (f"rank {rank}: ", f"host {host}: "):
        if rank is not None and detail.startswith(prefix):
            detail = detail[len(prefix):]
    where = f" on host {host}" if host else ""
    return f"{who}{where}: {detail}"[:2000]


ABORT_DELAY_S = 0.25  # between a rank's error report and its MPI_Abort


def report_failure(message: str, rank: int | None, peer: int | None = None) -> None:
    """The rank's last words; `t_ns` (its monotonic clock) lets an orchestrator on the same machine tell
    whether they came before another rank's death (then that death is a consequence of the abort); `peer`
    is the rank the failure blames, if one (a report blaming a rank that died is that death, seen)."""
    line = ERROR_MARKER + json.dumps({"rank": rank, "message": message, "t_ns": time.monotonic_ns(),
                                      "boot_id": boot_id(), "peer": peer}) + "\n"
    try:
        os.write(2, line.encode())
    except OSError:
        pass


class _Rank:
    """One rank's run, with the state its failure report needs."""

    def __init__(self, args: argparse.Namespace, outbox_fd: int) -> None:
        self.args = args
        self.launch = LaunchMap.from_json(json.loads(args.map_json))
        self.outbox_fd = outbox_fd
        self.rank: int | None = launcher_rank(os.environ)
        self.host: str | None = None
        self.comm: Any = None
        self.listener: Any = None
        self.transport: Any = None
        self.links: dict = {}  # (channel, peer) -> PeerLink (--transport tcp)

    def prepare(self) -> tuple[str, str]:
        from genie.engine.mpi.netif import local_ipv4_addresses

        if self.rank is None:
            raise EnvironmentProblem(f"no rank from the MPI launcher (none of {', '.join(RANK_VARIABLES)} "
                                     "is set): start it with MPICH's mpiexec")
        if self.rank >= self.launch.world:
            raise RunFailure(f"the MPI launcher started more ranks than the run needs ({self.launch.world})")
        self.host = self.launch.host_of(self.rank).name
        address, iface = choose_address(self.launch, self.rank, local_ipv4_addresses())
        point_mpi_at(iface)
        if self.args.transport == Transport.TCP:  # before MPI_Init, so MPI's own listeners walk around it
            self.listener = self._listen(address)
        return address, iface

    def _listen(self, address: str):
        from genie.engine.mpi.netif import listen_in_range

        ports = parse_port_range(self.args.port_range) if self.args.port_range else None
        candidates = port_candidates(ports, self.launch.local_rank(self.rank)) if ports else None
        try:
            return listen_in_range(address, candidates)
        except EnvironmentProblem as exc:
            where = f" in {self.args.port_range}" if ports else ""
            raise EnvironmentProblem(f"cannot listen on {address}{where}: {exc}") from None

    def run(self) -> int:
        address, iface = self.prepare()
        from mpi4py import MPI  # MPI_Init happens here, with the environment set above

        comm = self.comm = MPI.COMM_WORLD
        rank, world = comm.Get_rank(), comm.Get_size()
        if world != self.launch.world:
            raise RunFailure(f"mpiexec started {world} ranks but the run needs {self.launch.world} "
                             "(one per placement)")
        if rank != self.rank:
            raise RunFailure(f"MPI rank {rank} differs from the launcher's rank {self.rank}")
        return self._job(comm, address, iface)

    def _job(self, comm: Any, address: str, iface: str) -> int:
        from genie.engine.mpi.clocksync import barrier_lead_ns
        from genie.engine.mpi.control import MpiControl, Outbox, OutboxKind, measure_clock_offsets, receive_job

        rank, world = self.rank, self.launch.world
        outbox = Outbox(self.outbox_fd) if rank == 0 else None
        boots = comm.allgather(boot_id())
        envelope = receive_job(outbox, sys.stdin.buffer) if rank == 0 else None
        settings = comm.bcast({**{k: v for k, v in envelope.items() if k not in ("job", "jobs")},
                               "per_rank": "jobs" in envelope} if rank == 0 else None, root=0)
        if settings["per_rank"]:  # replay: one program per rank
            job_doc = comm.scatter([envelope["jobs"][str(r)] for r in range(world)] if rank == 0 else None,
                                   root=0)
        else:
            job_doc = comm.bcast(envelope["job"] if rank == 0 else None, root=0)
        job = job_from_json(job_doc)
        offsets = measure_clock_offsets(comm, int(self.args.clock_rounds), [b == boots[0] for b in boots])
        applied = comm.scatter([o.applied_ns for o in offsets] if rank == 0 else None, root=0)
        lead_ns = barrier_lead_ns(world, [o.rtt_ns for o in offsets]) if rank == 0 else 0
        if outbox:
            outbox.emit(OutboxKind.CLOCK, offsets=[o.to_json() for o in offsets])

        transport = self.args.transport
        listener = self.listener
        port = listener.getsockname()[1] if listener is not None else None
        started = comm.gather({"rank": rank, "host": self.host, "pid": os.getpid(), "address": address,
                               "port": port, "iface": iface, "boot_id": boots[rank]}, root=0)
        if outbox:
            outbox.emit(OutboxKind.STARTED, ranks=started)
        control = MpiControl(comm, rank, offset_ns=int(applied), lead_ns=lead_ns,
                             emit=outbox.emit if outbox else None)
        if transport == Transport.TCP:
            from genie.engine.rank import run_job_over_tcp

            book = comm.allgather((address, port))
            self.transport = run_job_over_tcp(
                job, rank, listener, {r: (a, int(p)) for r, (a, p) in enumerate(book)}, control, self.links,
                connect_timeout_s=(None if settings.get("connect_timeout_s") is None
                                   else float(settings["connect_timeout_s"])),
                socket_buffer_bytes=settings.get("socket_buffer_bytes"), spin_s=float(settings.get("spin_s", 0.0)),
                congestion=CongestionControl(settings.get("congestion_control", CongestionControl.CUBIC.value)))
        else:
            data_comm = comm.Dup()  # data never matches control messages
            try:
                run_job_over_mpi(job, rank, data_comm, control)
            finally:
                data_comm.Free()
        comm.Barrier()
        if outbox:
            outbox.emit(OutboxKind.DONE)
        return 0

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        if self.transport is not None:
            self.transport.close()
            self.transport = None
        for link in self.links.values():
            link.close()


def run_job_over_mpi(job: Job, rank: int, comm: Any, control: Any) -> None:
    """``--transport mpi``: a bench job through `MpiTransport`, a replay job through the walker with an
    `MpiMover`, both on `comm`."""
    match job:
        case ReplayJob():
            from genie.engine.mpi.mover import MpiMover
            from genie.engine.rank import run_replay_job

            run_replay_job(job, MpiMover(comm, job.program), control)
        case BenchJob():
            from genie.engine.mpi.transport import MpiTransport
            from genie.engine.rank import run_bench_job

            mpi_transport = MpiTransport(comm, rank)
            try:
                run_bench_job(job, rank, mpi_transport, control)
            finally:
                mpi_transport.close()
        case _:
            raise RunFailure(f"rank {rank}: cannot run a {type(job).__name__}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="genie-mpi-rank")
    parser.add_argument("--map-json", required=True)
    parser.add_argument("--transport", choices=Transport.ALL, default=Transport.TCP)
    parser.add_argument("--port-range", default=None)
    parser.add_argument("--clock-rounds", type=int, default=8)
    parser.add_argument("--watch", default=None, help="the session's watch socket (genie.engine.mpi.watch)")
    parser.add_argument("--watch-boot", default=None, help="the boot id of the session's machine")
    args = parser.parse_args(argv)
    die_with_parent()  # an orphaned rank never outlives its launcher (hydra's proxy)
    rank = launcher_rank(os.environ)
    if args.watch and rank is not None and args.watch_boot == boot_id():
        from genie.engine.mpi.watch import hold_watch

        hold_watch(args.watch, rank)  # held until this process ends: its closing says this rank is going
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # rank 0's stdout carries the marker lines alone: keep it aside, send fd 1 (print, C libraries) to stderr
    outbox_fd = os.dup(1)
    os.dup2(2, 1)
    state = _Rank(args, outbox_fd)
    try:
        return state.run()
    except SystemExit:
        raise
    except BaseException as exc:  # reported with rank and host, then every rank is stopped
        report_failure(failure_message(state.rank, state.host, exc), state.rank,
                       exc.peer if isinstance(exc, PeerFailure) else None)
        if state.comm is not None:
            state.close()
            time.sleep(ABORT_DELAY_S)  # the report first: every death the abort causes comes clearly after it
            state.comm.Abort(1)
        return 1
    finally:
        state.close()


if __name__ == "__main__":
    sys.exit(main())
