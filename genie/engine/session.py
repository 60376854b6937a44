"""The orchestrator side of a run: start rank programs, rendezvous, hand out the job, relay barriers, gather
records, and always stop every process it started (by PID) — on success, failure, Ctrl-C or SIGTERM."""

from __future__ import annotations

import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from genie.core.errors import RunFailure
from genie.core.placement import RankPlacement
from genie.engine.control import ControlClosed, recv_message, send_message
from genie.engine.launch import Launcher, NamespaceLauncher, log_tail, stop_processes


@dataclass
class SessionResult:
    case_results: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)  # case -> rank -> message


@dataclass(frozen=True)
class SessionOptions:
    """How a session runs its ranks, whatever starts them (local processes, MPI)."""

    idle_timeout_s: float = 120.0
    spin_s: float = 0.0
    socket_buffer_bytes: int | None = None
    on_pids: Callable[[list[int]], None] | None = None
    fault_hooks: FaultHooks | None = None  # live fault injection (genie.faults); local sessions only


class FaultHooks(Protocol):
    """Told when the first timed barrier is released (the run clock's zero) and, while every rank waits at
    the barrier before timed op k, asked to inject that op's faults (`genie.faults.injector.FaultInjector`)."""

    def timed_start(self, start_ns: int) -> None: ...

    def fault_point(self, op_index: int, reports: dict[int, dict[str, Any]] | None = None) -> None:
        """`reports`: each rank's barrier message (a bench rank reports its timed iterations so far)."""


class Session(Protocol):
    """Runs one job on a set of rank placements; `on_case(case, per_rank)` as each case completes."""

    def run(self, job: dict[str, Any] | Callable[[int], dict[str, Any]],
            on_case: Callable[[int, dict[int, dict[str, Any]]], None] | None = None) -> SessionResult: ...


SessionFactory = Callable[[list[RankPlacement], SessionOptions], Session]


def local_sessions(launcher: Launcher | None = None) -> SessionFactory:
    """Sessions whose orchestrator starts every rank on this machine (in testbed namespaces or not)."""

    def make(placements: list[RankPlacement], options: SessionOptions) -> Session:
        return RankSession(placements, launcher=launcher, on_pids=options.on_pids,
                           idle_timeout_s=options.idle_timeout_s, spin_s=options.spin_s,
                           socket_buffer_bytes=options.socket_buffer_bytes, fault_hooks=options.fault_hooks)

    return make


class RankSession:
    """Runs one job on a set of rank placements. Use as a context manager or call `run` directly."""

    def __init__(self, placements: list[RankPlacement], *, launcher: Launcher | None = None,
                 on_pids: Callable[[list[int]], None] | None = None, startup_timeout_s: float = 60.0,
                 idle_timeout_s: float = 120.0, socket_buffer_bytes: int | None = None,
                 spin_s: float = 0.0, fault_hooks: FaultHooks | None = None) -> None:
        self.spin_s = spin_s
        self.fault_hooks = fault_hooks
        self.start_lead_ns = max(2_000_000, 150_000 * len(placements))
        self.placements = sorted(placements, key=lambda p: p.rank)
        self.launcher = launcher or NamespaceLauncher()
        self.on_pids = on_pids
        self.startup_timeout_s = startup_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.socket_buffer_bytes = socket_buffer_bytes
        self._procs: dict[int, subprocess.Popen] = {}
        self._logs: dict[int, Path] = {}
        self._conns: dict[int, socket.socket] = {}

    def run(self, job: dict[str, Any] | Callable[[int], dict[str, Any]],
            on_case: Callable[[int, dict[int, dict[str, Any]]], None] | None = None) -> SessionResult:
        """Run `job` (the same for every rank, or a function of the rank) to the end; `on_case(case, per_rank)`
        is called as soon as every rank has reported a case (a bench size, a replay iteration)."""
        workdir = Path(tempfile.mkdtemp(prefix="genie-run-"))
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            path = str(workdir / "control.sock")
            server.bind(path)
            server.listen(len(self.placements) + 8)
            self._start_ranks(path, workdir)
            ports = self._rendezvous(server)
            addresses = {str(p.rank): [p.address, ports[p.rank]] for p in self.placements}
            for rank in self._conns:
                self._send(rank, {"type": "setup", "addresses": addresses,
                                  "job": job(rank) if callable(job) else job,
                                  "socket_buffer_bytes": self.socket_buffer_bytes, "spin_s": self.spin_s},
                           "startup")
            result = self._serve(on_case)
            for conn in self._conns.values():
                try:
                    send_message(conn, {"type": "exit"})
                except OSError:
                    pass  # every rank reported "done": one that is gone already has nothing left to do
            self._reap()
            return result
        finally:
            stop_processes(list(self._procs.values()))
            for conn in self._conns.values():
                conn.close()
            server.close()
            shutil.rmtree(workdir, ignore_errors=True)

    def _start_ranks(self, control_path: str, workdir: Path) -> None:
        world = len(self.placements)
        for p in self.placements:
            argv = [sys.executable, "-m", "genie.engine.rank", "--control", control_path, "--rank", str(p.rank),
                    "--address", p.address, "--world", str(world)]
            log = workdir / f"rank-{p.rank}.log"
            self._logs[p.rank] = log
            self._procs[p.rank] = self.launcher.start(p, argv, log)
        if self.on_pids:
            self.on_pids([proc.pid for proc in self._procs.values()])

    def _dead_rank_error(self, rank: int, during: str) -> RunFailure:
        proc = self._procs[rank]
        try:
            code = proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            code = None
        tail = log_tail(self._logs[rank])
        status = "exited" if code is None else f"exited with code {code}"
        placement = next(p for p in self.placements if p.rank == rank)
        return RunFailure(f"rank {rank} on host {placement.host} {status} during {during}"
                          + (f": {tail}" if tail else ""))

    def _send(self, rank: int, message: dict[str, Any], during: str) -> None:
        """A control message to `rank`; a rank that died meanwhile is named, not a broken pipe."""
        try:
            send_message(self._conns[rank], message)
        except OSError:
            raise self._dead_rank_error(rank, during) from None

    def _check_alive(self, during: str) -> None:
        for rank, proc in self._procs.items():
            if proc.poll() is not None:
                raise self._dead_rank_error(rank, during)

    def _rendezvous(self, server: socket.socket) -> dict[int, int]:
        server.settimeout(0.2)
        ports: dict[int, int] = {}
        deadline = time.monotonic() + self.startup_timeout_s
        while len(ports) < len(self.placements):
            if time.monotonic() > deadline:
                missing = sorted(set(self._procs) - set(ports))
                raise RunFailure(f"ranks {missing} did not start within {self.startup_timeout_s:g} s")
            try:
                conn, _ = server.accept()
            except socket.timeout:
                self._check_alive("startup")
                continue
            conn.settimeout(self.startup_timeout_s)
            hello = recv_message(conn)
            if hello.get("type") == "error":
                raise RunFailure(hello["message"])
            rank = int(hello["rank"])
            conn.settimeout(None)
            self._conns[rank] = conn
            ports[rank] = int(hello["port"])
        return ports

    def _serve(self, on_case) -> SessionResult:
        result = SessionResult()
        sel = selectors.DefaultSelector()
        for rank, conn in self._conns.items():
            sel.register(conn, selectors.EVENT_READ, rank)
        waiting: set[int] = set()
        tags: dict[str, Any] = {}  # what the waiting ranks said about this barrier (timed, fault_point)
        reports: dict[int, dict[str, Any]] = {}
        done: set[int] = set()
        last_activity = time.monotonic()
        try:
            while len(done) < len(self._conns):
                events = sel.select(timeout=0.5)
                if not events:
                    self._check_alive("the run")
                    if time.monotonic() - last_activity > self.idle_timeout_s:
                        raise RunFailure(f"no progress for {self.idle_timeout_s:g} s "
                                         f"(ranks still running: {sorted(set(self._conns) - done)})")
                    continue
                last_activity = time.monotonic()
                for key, _ in events:
                    rank = key.data
                    try:
                        msg = recv_message(key.fileobj)
                    except (ControlClosed, ConnectionError):
                        raise self._dead_rank_error(rank, "the run") from None
                    kind = msg.get("type")
                    if kind == "error":
                        raise RunFailure(msg["message"])
                    if kind == "barrier":
                        waiting.add(rank)
                        tags.update({k: msg[k] for k in ("timed", "fault_point") if msg.get(k) is not None})
                        if "fault_point" in msg:
                            reports[rank] = msg
                        if len(waiting) == len(self._conns):
                            if self.fault_hooks is not None and "fault_point" in tags:
                                self.fault_hooks.fault_point(int(tags["fault_point"]), dict(reports))
                            # a common start time on the shared monotonic clock: every rank waits for it,
                            # so all start within microseconds instead of in the order they were told
                            start_ns = time.monotonic_ns() + self.start_lead_ns
                            for peer in self._conns:
                                self._send(peer, {"type": "go", "start_ns": start_ns}, "the run")
                            if self.fault_hooks is not None and tags.get("timed"):
                                self.fault_hooks.timed_start(start_ns)
                            waiting.clear()
                            tags.clear()
                            reports.clear()
                    elif kind == "case_result":
                        per_rank = result.case_results.setdefault(int(msg["case"]), {})
                        per_rank[rank] = msg
                        if on_case and len(per_rank) == len(self._conns):
                            on_case(int(msg["case"]), per_rank)
                    elif kind == "done":
                        done.add(rank)
                    else:
                        raise RunFailure(f"rank {rank} sent an unknown control message {kind!r}")
        finally:
            sel.close()
        return result

    def _reap(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        for proc in self._procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
