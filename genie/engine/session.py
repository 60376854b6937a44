"""The orchestrator side of a run: start rank programs, rendezvous, hand out the job, relay barriers, gather
records, and always stop every process it started (by PID) — on success, failure, Ctrl-C or SIGTERM.

`Orchestrator` speaks the control protocol (`genie.core.protocol`) over one connected control socket per
rank, whatever started the ranks: `RankSession` starts them as processes (``python -m genie.engine.rank``),
`genie.engine.inprocess` as threads of this process.
"""

from __future__ import annotations

import selectors
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from genie.core.congestion import CongestionControl
from genie.core.errors import RunFailure
from genie.core.flowpath import FlowTuple
from genie.core.placement import RankPlacement
from genie.core.protocol import (Barrier, CaseResult, Done, Error, Exit, Go, Hello, Job, Message, MessageKind,
                                 ProtocolError, Setup)
from genie.engine.control import ControlClosed, recv_message, send_message
from genie.engine.launch import Launcher, NamespaceLauncher, log_tail, stop_processes


@dataclass
class SessionResult:
    case_results: dict[int, dict[int, CaseResult]] = field(default_factory=dict)  # case -> rank -> result
    peak_rss_kb: dict[int, int] = field(default_factory=dict)  # rank -> its process's peak RSS (local ranks)
    flows: list[FlowTuple] = field(default_factory=list)  # every rank's sending connections (TCP ranks)


@dataclass(frozen=True)
class SessionOptions:
    """How a session runs its ranks, whatever starts them (local processes, MPI)."""

    idle_timeout_s: float = 120.0
    spin_s: float = 0.0
    socket_buffer_bytes: int | None = None
    congestion: CongestionControl = CongestionControl.CUBIC  # every data connection's (genie.core.congestion)
    on_pids: Callable[[list[int]], None] | None = None
    fault_hooks: FaultHooks | None = None  # live fault injection (genie.faults); local sessions only
    #: told of every barrier once all ranks wait at it, before they are released (a rank's message: the case
    #: tags are every rank's); sessions whose barriers the orchestrator relays only (not MPI). It must not raise
    #: (what it raises ends the run as an error of genie's, not of the ranks)
    on_barrier: Callable[[Barrier], None] | None = None


class FaultHooks(Protocol):
    """Told when the first timed barrier is released (the run clock's zero) and, while every rank waits at
    the barrier before timed op k, asked to inject that op's faults (`genie.faults.injector.FaultInjector`)."""

    def timed_start(self, start_ns: int) -> None: ...

    def fault_point(self, op_index: int, reports: dict[int, Barrier] | None = None) -> None:
        """`reports`: each rank's barrier message (a bench rank reports its timed iterations so far)."""


class Session(Protocol):
    """Runs one job on a set of rank placements; `on_case(case, per_rank)` as each case completes."""

    def run(self, job: Job | Callable[[int], Job],
            on_case: Callable[[int, dict[int, CaseResult]], None] | None = None) -> SessionResult: ...


SessionFactory = Callable[[list[RankPlacement], SessionOptions], Session]


class RankHealth(Protocol):
    """How an orchestrator names a rank that went away (a process's exit status and log, a thread's end)."""

    def check_alive(self, during: str) -> None:
        """Raise the RunFailure of the first rank found dead."""

    def dead_rank_error(self, rank: int, during: str) -> RunFailure: ...


def read_hello(conn: socket.socket, timeout_s: float) -> Hello:
    """A rank's first message on its new control connection; its `Error` (it could not start) is raised."""
    conn.settimeout(timeout_s)
    hello = recv_message(conn)
    if isinstance(hello, Error):
        raise RunFailure(hello.message)
    if not isinstance(hello, Hello):
        raise RunFailure(f"a rank sent a {hello.kind.value} message before its hello")
    conn.settimeout(None)
    return hello


@dataclass
class _Serving:
    """The state of one `Orchestrator.serve`: the barrier being gathered and the ranks done."""

    result: SessionResult
    on_case: Callable[[int, dict[int, CaseResult]], None] | None
    waiting: set[int] = field(default_factory=set)
    timed: bool = False  # what the waiting ranks said about this barrier
    fault_point: int | None = None
    reports: dict[int, Barrier] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)  # the ranks' errors, in the order they arrived
    error_ranks: set[int] = field(default_factory=set)  # the ranks that sent them
    vanished: list[int] = field(default_factory=list)  # ranks gone after the first error without one of their own
    error_deadline: float | None = None  # when the errors are reported (see ERROR_GRACE_S)


#: after a rank's error, how long the other ranks' errors are awaited before one is reported: when a rank gives up
#: (its op timed out) and exits, its peers see it close their connections, and their errors can arrive first
ERROR_GRACE_S = 0.3
#: what a rank says when its failure is a peer's exit, not a cause of its own
_CONSEQUENCES = ("closed the connection", "lost while")


def is_consequence(error: str) -> bool:
    """Whether a rank's error says only that a peer left (its connection closed or was lost)."""
    return any(c in error for c in _CONSEQUENCES)


def root_cause(errors: list[str]) -> str:
    """The error to report of several ranks' errors: the first that is not a consequence of a peer leaving."""
    return next((e for e in errors if not is_consequence(e)), errors[0])


class Orchestrator:
    """The orchestrator's side of the control protocol over one connected control socket per rank (`conns`):
    send the setup, relay barriers (common start times, fault hooks), gather case results, release the ranks.
    `health` names a rank that went away."""

    def __init__(self, conns: dict[int, socket.socket], health: RankHealth, *, idle_timeout_s: float,
                 fault_hooks: FaultHooks | None = None, start_lead_ns: int | None = None,
                 on_barrier: Callable[[Barrier], None] | None = None) -> None:
        self.conns = conns
        self.health = health
        self.idle_timeout_s = idle_timeout_s
        self.fault_hooks = fault_hooks
        self.on_barrier = on_barrier
        self.start_lead_ns = start_lead_ns if start_lead_ns is not None else max(2_000_000, 150_000 * len(conns))

    def send(self, rank: int, message: Message, during: str) -> None:
        """A control message to `rank`; a rank that died meanwhile is named, not a broken pipe."""
        try:
            send_message(self.conns[rank], message)
        except OSError:
            raise self.health.dead_rank_error(rank, during) from None

    def setup(self, addresses: dict[int, tuple[str, int]], job: Job | Callable[[int], Job], *,
              socket_buffer_bytes: int | None, spin_s: float,
              congestion: CongestionControl = CongestionControl.CUBIC) -> None:
        for rank in self.conns:
            self.send(rank, Setup(addresses=addresses, job=job(rank) if callable(job) else job,
                                  socket_buffer_bytes=socket_buffer_bytes, spin_s=spin_s,
                                  congestion_control=congestion), "startup")

    def release(self) -> None:
        """Every rank reported done: tell them to exit (one that is gone already has nothing left to do)."""
        for conn in self.conns.values():
            try:
                send_message(conn, Exit())
            except OSError:
                pass

    def serve(self, on_case: Callable[[int, dict[int, CaseResult]], None] | None) -> SessionResult:
        """Until every rank is done: each message goes to the handler of its kind; `on_case(case, per_rank)` as
        soon as every rank has reported a case (a bench size, a replay iteration)."""
        handlers: dict[MessageKind, Callable[[int, Message, _Serving], None]] = {
            MessageKind.ERROR: self._on_error,
            MessageKind.BARRIER: self._on_barrier,
            MessageKind.CASE_RESULT: self._on_case_result,
            MessageKind.DONE: self._on_done,
        }
        state = _Serving(SessionResult(), on_case)
        sel = selectors.DefaultSelector()
        for rank, conn in self.conns.items():
            sel.register(conn, selectors.EVENT_READ, rank)
        last_activity = time.monotonic()
        try:
            while len(state.done) < len(self.conns):
                if state.error_deadline is not None and (time.monotonic() >= state.error_deadline
                                                         or not sel.get_map()):
                    raise self._failure(state)
                wait_s = 0.5 if state.error_deadline is None else \
                    max(0.0, min(0.5, state.error_deadline - time.monotonic()))
                events = sel.select(timeout=wait_s)
                if not events:
                    if state.error_deadline is not None:
                        continue
                    self.health.check_alive("the run")
                    if time.monotonic() - last_activity > self.idle_timeout_s:
                        raise RunFailure(f"no progress for {self.idle_timeout_s:g} s "
                                         f"(ranks still running: {sorted(set(self.conns) - state.done)})")
                    continue
                last_activity = time.monotonic()
                for key, _ in events:
                    rank = key.data
                    try:
                        msg = recv_message(key.fileobj)
                    except ProtocolError as exc:
                        raise RunFailure(f"rank {rank}: {exc}") from None
                    except (ControlClosed, ConnectionError):
                        if state.error_deadline is not None:  # a rank leaving after the first error
                            sel.unregister(key.fileobj)
                            if rank not in state.error_ranks and rank not in state.done:
                                state.vanished.append(rank)
                            continue
                        raise self.health.dead_rank_error(rank, "the run") from None
                    handler = handlers.get(msg.kind)
                    if handler is None:
                        raise RunFailure(f"rank {rank} sent an unexpected control message {msg.kind.value!r}")
                    handler(rank, msg, state)
        finally:
            sel.close()
        return state.result

    def _failure(self, state: _Serving) -> RunFailure:
        """The run's failure once the ranks' errors are in: the first that is a cause of its own; where every one
        only says a peer left, the rank that left without a word (killed, crashed) is the cause, not its peers'
        reports of it (which of them reports first is a race)."""
        cause = root_cause(state.errors)
        if is_consequence(cause) and state.vanished:
            return self.health.dead_rank_error(state.vanished[0], "the run")
        return RunFailure(cause)

    def _on_error(self, rank: int, msg: Error, state: _Serving) -> None:
        state.errors.append(msg.message)
        state.error_ranks.add(rank)
        if state.error_deadline is None:
            state.error_deadline = time.monotonic() + ERROR_GRACE_S

    def _on_barrier(self, rank: int, msg: Barrier, state: _Serving) -> None:
        state.waiting.add(rank)
        state.timed = state.timed or msg.timed
        if msg.fault_point is not None:
            state.fault_point = msg.fault_point
            state.reports[rank] = msg
        if len(state.waiting) < len(self.conns):
            return
        if self.on_barrier is not None:  # every rank waits (the last one's message: the case tags are all's)
            self.on_barrier(msg)
        hooks = self.fault_hooks
        if hooks is not None and state.fault_point is not None:
            hooks.fault_point(state.fault_point, dict(state.reports))
        # a common start time on the shared monotonic clock: every rank waits for it, so all start within
        # microseconds instead of in the order they were told
        start_ns = time.monotonic_ns() + self.start_lead_ns
        for peer in self.conns:
            self.send(peer, Go(start_ns=start_ns), "the run")
        if hooks is not None and state.timed:
            hooks.timed_start(start_ns)
        state.waiting.clear()
        state.timed, state.fault_point = False, None
        state.reports.clear()

    def _on_case_result(self, rank: int, msg: CaseResult, state: _Serving) -> None:
        per_rank = state.result.case_results.setdefault(msg.case, {})
        per_rank[rank] = msg
        if state.on_case and len(per_rank) == len(self.conns):
            state.on_case(msg.case, per_rank)

    def _on_done(self, rank: int, msg: Done, state: _Serving) -> None:
        state.done.add(rank)
        if msg.peak_rss_kb:
            state.result.peak_rss_kb[rank] = msg.peak_rss_kb
        state.result.flows.extend(msg.flows)


def local_sessions(launcher: Launcher | None = None) -> SessionFactory:
    """Sessions whose orchestrator starts every rank on this machine (in testbed namespaces or not)."""

    def make(placements: list[RankPlacement], options: SessionOptions) -> Session:
        return RankSession(placements, launcher=launcher, on_pids=options.on_pids,
                           idle_timeout_s=options.idle_timeout_s, spin_s=options.spin_s,
                           socket_buffer_bytes=options.socket_buffer_bytes, congestion=options.congestion,
                           fault_hooks=options.fault_hooks, on_barrier=options.on_barrier)

    return make


class RankSession:
    """Runs one job on a set of rank placements. Use as a context manager or call `run` directly."""

    def __init__(self, placements: list[RankPlacement], *, launcher: Launcher | None = None,
                 on_pids: Callable[[list[int]], None] | None = None, startup_timeout_s: float = 60.0,
                 idle_timeout_s: float = 120.0, socket_buffer_bytes: int | None = None,
                 congestion: CongestionControl = CongestionControl.CUBIC,
                 spin_s: float = 0.0, fault_hooks: FaultHooks | None = None,
                 on_barrier: Callable[[Barrier], None] | None = None) -> None:
        self.spin_s = spin_s
        self.fault_hooks = fault_hooks
        self.on_barrier = on_barrier
        self.start_lead_ns = max(2_000_000, 150_000 * len(placements))
        self.placements = sorted(placements, key=lambda p: p.rank)
        self.launcher = launcher or NamespaceLauncher()
        self.on_pids = on_pids
        self.startup_timeout_s = startup_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.socket_buffer_bytes = socket_buffer_bytes
        self.congestion = congestion
        self._procs: dict[int, subprocess.Popen] = {}
        self._logs: dict[int, Path] = {}
        self._conns: dict[int, socket.socket] = {}

    def run(self, job: Job | Callable[[int], Job],
            on_case: Callable[[int, dict[int, CaseResult]], None] | None = None) -> SessionResult:
        """Run `job` (the same for every rank, or a function of the rank) to the end; `on_case(case, per_rank)`
        is called as soon as every rank has reported a case (a bench size, a replay iteration)."""
        remove_stale_workdirs()
        workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            path = str(workdir / "control.sock")
            server.bind(path)
            server.listen(len(self.placements) + 8)
            self._start_ranks(path, workdir)
            ports = self._rendezvous(server)
            control = Orchestrator(self._conns, self, idle_timeout_s=self.idle_timeout_s,
                                   fault_hooks=self.fault_hooks, start_lead_ns=self.start_lead_ns,
                                   on_barrier=self.on_barrier)
            control.setup({p.rank: (p.address, ports[p.rank]) for p in self.placements}, job,
                          socket_buffer_bytes=self.socket_buffer_bytes, spin_s=self.spin_s,
                          congestion=self.congestion)
            result = control.serve(on_case)
            control.release()
            self._reap()
            return result
        finally:
            stop_processes(list(self._procs.values()))
            for conn in self._conns.values():
                conn.close()
            server.close()
            shutil.rmtree(workdir, ignore_errors=True)

    def _start_ranks(self, control_path: str, workdir: Path) -> None:
        for p in self.placements:
            argv = [sys.executable, "-m", "genie.engine.rank", "--control", control_path, "--rank", str(p.rank),
                    "--address", p.address]
            log = workdir / f"rank-{p.rank}.log"
            self._logs[p.rank] = log
            self._procs[p.rank] = self.launcher.start(p, argv, log)
        if self.on_pids:
            self.on_pids([proc.pid for proc in self._procs.values()])

    def dead_rank_error(self, rank: int, during: str) -> RunFailure:
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

    def check_alive(self, during: str) -> None:
        for rank, proc in self._procs.items():
            if proc.poll() is not None:
                raise self.dead_rank_error(rank, during)

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
                self.check_alive("startup")
                continue
            hello = read_hello(conn, self.startup_timeout_s)
            self._conns[hello.rank] = conn
            ports[hello.rank] = hello.port
        return ports

    def _reap(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        for proc in self._procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


WORKDIR_PREFIX = "genie-run-"


def remove_stale_workdirs(directory: Path | None = None) -> list[Path]:
    """Remove the ``genie-run-<pid>-*`` work directories (control socket, rank logs) of sessions whose process
    is gone — a SIGKILLed run cannot remove its own. Only this user's directories, only of dead PIDs."""
    root = Path(directory or tempfile.gettempdir())
    removed = []
    for path in root.glob(f"{WORKDIR_PREFIX}*"):
        owner = path.name[len(WORKDIR_PREFIX):].split("-", 1)[0]
        if not owner.isdigit() or int(owner) == os.getpid():
            continue
        try:
            if path.lstat().st_uid != os.getuid() or not path.is_dir() or path.is_symlink():
                continue
            os.kill(int(owner), 0)
            continue  # its session may still be running
        except ProcessLookupError:
            if _answers(path / "control.sock"):
                continue  # a live session of another PID namespace sharing this /tmp
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:
            continue
    return removed


def _answers(control_path: Path) -> bool:
    """Does a session still listen on this control socket?"""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.2)
        probe.connect(str(control_path))
        return True
    except OSError:
        return False
    finally:
        probe.close()
