"""`MpiSession`: a `Session` whose ranks mpiexec (MPICH's hydra) starts — in the namespaces of a testbed on
this machine (through the trampoline) or on the real hosts of an inventory (through a hostfile and ssh) — or,
inside a Slurm allocation, Slurm's srun (`MpiLaunch.slurm`; the ranks bootstrap MPI through Slurm's PMI).

The orchestrator talks only to mpiexec's standard streams: rank 0 writes ``@genie-mpi {json}`` lines on
stdout (job requests, clock offsets, the ranks' places, gathered case results, done) and reads the job,
chunk by chunk, from stdin; every rank's failure arrives as an ``@genie-mpi-error`` line on stderr. Whatever
happens, mpiexec and every process under it are stopped by PID before `run` returns.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

from genie.core.errors import RunFailure
from genie.core.placement import RankPlacement
from genie.core.protocol import CaseResult, Job, ProtocolError, decode_message, job_to_json
from genie.engine.mpi import plan
from genie.engine.mpi.control import OutboxKind, encode_job
from genie.engine.mpi.processes import Proc, descendants, identify, stop_tree
from genie.engine.mpi.slurm import HOSTFILE_ENV, SlurmLaunch, slurm_hostfile, srun_argv
from genie.engine.mpi.watch import RankWatch
from genie.engine.session import SessionOptions, SessionResult
from genie.inventory.model import Inventory

_PR_SET_PDEATHSIG = 1
_HYDRA_TRACE = re.compile(r"^\[(mpiexec|proxy:[^\]]*)@[^\]]*\] ")
_BANNER_PID = re.compile(r"^=\s+PID (\d+) RUNNING AT (\S+)")
_EXIT_STRING = re.compile(r"EXIT STRING: (.+)$")
_ERROR_GRACE_S = 1.0
_ERROR_LEAD_NS = 100_000_000  # < the ranks' ABORT_DELAY_S: margin for this loop noticing a death late


def _here() -> str:
    from genie.engine.mpi.rank import boot_id

    return boot_id()


def _term_with_parent() -> None:  # in mpiexec between fork and exec: SIGTERM lets hydra stop its ranks
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


@dataclass(frozen=True)
class MpiLaunch:
    """How to start ranks with MPI, whatever the job: the mpiexec to run, the data transport, the inventory of
    a real-host run (None: placements on this machine), the ports rank listeners take, extra mpiexec
    arguments, and a prefix to run mpiexec under (``ip netns exec NS`` — tests emulate real hosts so).
    With `slurm` set, `mpiexec` is Slurm's srun and the ranks go where `slurm` places them."""

    mpiexec: Path
    transport: str = plan.Transport.TCP
    inventory: Inventory | None = None
    port_range: range | None = None
    extra_args: tuple[str, ...] = ()
    command_prefix: tuple[str, ...] = ()
    python: str = sys.executable
    clock_rounds: int = 8
    startup_timeout_s: float = 60.0
    connect_timeout_s: float | None = None  # None: the job's op timeout
    slurm: SlurmLaunch | None = None


@dataclass
class _Run:
    lines_err: list[str] = field(default_factory=list)
    first_error: str | None = None
    done: bool = False
    started: bool = False
    dead_pid: int | None = None  # hydra's "BAD TERMINATION" banner: the process that ended the run
    exit_string: str | None = None
    error_at: float | None = None
    error_ranks: set = field(default_factory=set)  # ranks that reported an error themselves
    first_dead: int | None = None  # the first rank on this machine seen going (its watch connection, pidfd)
    first_dead_ns: int | None = None  # when (this machine's monotonic clock)
    dead: set = field(default_factory=set)  # every rank on this machine seen exiting during the run
    first_blamed: int | None = None  # the peer the first error report blames (its connection closed)
    error_times_ns: list = field(default_factory=list)  # (t_ns, blamed rank or None) of reports written here
    watch: RankWatch | None = None
    early: list = field(default_factory=list)  # (rank, t_ns) seen going before rank 0's STARTED line was read


class _LineContext(NamedTuple):
    """What the handlers of rank 0's marker lines act on during one `MpiSession._serve`."""

    proc: subprocess.Popen
    chunks: list[str]
    state: _Run
    result: SessionResult
    on_case: Callable[[int, dict[int, CaseResult]], None] | None


class MpiSession:
    """One job on `placements`, launched by mpiexec. After `run`: `clock_offsets` (per rank, as rank 0
    measured them) and `ranks` (each rank's host, pid, listen address, port and interface)."""

    def __init__(self, placements: list[RankPlacement], options: SessionOptions, launch: MpiLaunch) -> None:
        self.placements = sorted(placements, key=lambda p: p.rank)
        self.options = options
        self.launch = launch
        self.clock_offsets: list[dict[str, Any]] = []
        self.ranks: list[dict[str, Any]] = []
        self.mpiexec_pid: int | None = None
        self.log_path: Path | None = None
        self._known: list[Proc] = []
        self._env: dict[str, str] = {}
        self._watch: tuple[str, str] | None = None  # the watch socket's path and this machine's boot id
        self.starter = Path(launch.mpiexec).name  # mpiexec or srun, for messages
        if launch.slurm is not None:
            self.rank_nodes = launch.slurm.rank_nodes(self.placements)  # checked before anything starts

    def command(self, workdir: Path) -> list[str]:
        """mpiexec's argv for this session (files it names are written into `workdir`)."""
        launch = self.launch
        lmap = plan.launch_map(self.placements, launch.inventory)
        rank_cmd = plan.rank_argv(launch.python, lmap, transport=launch.transport, port_range=launch.port_range,
                                  clock_rounds=launch.clock_rounds, watch=self._watch)
        command = rank_cmd
        if lmap.namespaced:
            map_path = workdir / "map.json"
            map_path.write_text(lmap.dumps())
            command = plan.trampoline_argv(launch.python, map_path, rank_cmd)
        if launch.slurm is not None:
            hostfile_path = workdir / "slurm-hosts"
            hostfile_path.write_text(slurm_hostfile(self.rank_nodes))
            self._env = {HOSTFILE_ENV: str(hostfile_path)}
            return [*launch.command_prefix, *srun_argv(launch.mpiexec, lmap.world, command,
                                                       mpi_type=launch.slurm.mpi_type, extra=launch.extra_args)]
        hostfile_path = None
        if launch.inventory is not None:
            hostfile_path = workdir / "hostfile"
            hostfile_path.write_text(plan.mpi_hostfile(lmap))
        return [*launch.command_prefix, *plan.mpiexec_argv(launch.mpiexec, lmap.world, command,
                                                           hostfile_path=hostfile_path, extra=launch.extra_args)]

    def run(self, job: Job | Callable[[int], Job],
            on_case: Callable[[int, dict[int, CaseResult]], None] | None = None) -> SessionResult:
        envelope: dict[str, Any] = {"socket_buffer_bytes": self.options.socket_buffer_bytes,
                                    "spin_s": self.options.spin_s,
                                    "connect_timeout_s": self.launch.connect_timeout_s,
                                    "congestion_control": self.options.congestion.value}
        if callable(job):
            envelope["jobs"] = {str(p.rank): job_to_json(job(p.rank)) for p in self.placements}
        else:
            envelope["job"] = job_to_json(job)
        chunks = encode_job(envelope)
        workdir = Path(tempfile.mkdtemp(prefix="genie-mpi-"))
        self.log_path = workdir / "mpiexec.log"
        proc: subprocess.Popen | None = None
        watch: RankWatch | None = None
        try:
            watch = RankWatch(selectors.DefaultSelector(), workdir / "watch.sock")
            self._watch = (str(watch.path), _here()) if watch.listening else None
            argv = self.command(workdir)
            env = plan.launch_env(os.environ, port_range=self.launch.port_range,
                                  real_hosts=self.launch.inventory is not None)
            env.update(self._env)
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env=env, preexec_fn=_term_with_parent, close_fds=True)
            except OSError as exc:
                raise RunFailure(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
            self.mpiexec_pid = proc.pid
            if self.options.on_pids:
                self.options.on_pids([proc.pid])
            return self._serve(proc, chunks, on_case, watch)
        finally:  # the processes first: nothing before stop_tree may keep it from running
            if proc is not None:
                stop_tree(proc, self._known)
                for stream in (proc.stdin, proc.stdout, proc.stderr):
                    try:
                        stream.close()
                    except (OSError, ValueError):
                        pass
            if watch is not None:
                watch.close()
                watch.selector.close()
            shutil.rmtree(workdir, ignore_errors=True)

    # -- the streams ---------------------------------------------------------------------------------------

    def _serve(self, proc: subprocess.Popen, chunks: list[str],
               on_case: Callable[[int, dict[int, CaseResult]], None] | None, watch: RankWatch) -> SessionResult:
        result = SessionResult()
        state = _Run(watch=watch)
        ctx = _LineContext(proc, chunks, state, result, on_case)
        sel = watch.selector
        buffers = {proc.stdout: bytearray(), proc.stderr: bytearray()}
        for stream in buffers:
            os.set_blocking(stream.fileno(), False)
            sel.register(stream, selectors.EVENT_READ)
        last = time.monotonic()
        open_streams = 2
        with open(self.log_path, "ab") as log:
            while open_streams:
                if state.first_error is not None:
                    # a rank's error ends the run; a moment more shows whether hydra names another rank
                    # that died without a word (the error may only be a peer seeing it go)
                    if state.error_at is None:
                        state.error_at = time.monotonic()
                    elif time.monotonic() - state.error_at > _ERROR_GRACE_S:
                        break
                limit = self.launch.startup_timeout_s if not state.started else self.options.idle_timeout_s
                if time.monotonic() - last > limit:
                    raise RunFailure(self._timeout_message(state, limit))
                for key, _ in sel.select(timeout=0.1 if state.first_error else 0.5):
                    stream = key.fileobj
                    if watch.owns(key):  # a local rank's watch connection or pidfd
                        self._ranks_going(state, watch.on_ready(key))
                        continue
                    data = os.read(stream.fileno(), 1 << 16)
                    if not data:
                        sel.unregister(stream)
                        open_streams -= 1
                        continue
                    last = time.monotonic()
                    buf = buffers[stream]
                    if b"\n" not in data:  # a long line (gathered records) arrives in many reads
                        buf += data
                        continue
                    buf += data
                    *lines, rest = buf.split(b"\n")
                    buffers[stream] = bytearray(rest)
                    for raw in lines:
                        log.write(raw + b"\n")
                        line = raw.decode(errors="replace")
                        if stream is proc.stdout:
                            self._on_stdout(line, ctx)
                        else:
                            self._on_stderr(line, state)
                log.flush()
            if not state.done and state.started:  # which rank went first, if mpiexec went quicker than that
                for key, _ in sel.select(timeout=0.3):
                    if watch.owns(key):
                        self._ranks_going(state, watch.on_ready(key))
        if state.first_error:
            silent = self._silent_death(state)
            raise RunFailure(silent or state.first_error)
        try:
            code = proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            code = None
        if not state.done or code != 0:
            raise RunFailure(self._exit_message(code, state))
        return result

    def _on_stdout(self, line: str, ctx: _LineContext) -> None:
        if not line.startswith(plan.MARKER):
            self._note(line, ctx.state)  # hydra writes its banners on stdout
            return
        msg = json.loads(line[len(plan.MARKER):])
        raw = msg.pop("type", None)
        try:
            kind = OutboxKind(raw)
        except ValueError:
            raise RunFailure(f"rank 0 wrote an unknown line kind {raw!r} to {self.starter}") from None
        handlers: dict[OutboxKind, Callable[[dict[str, Any], _LineContext], None]] = {
            OutboxKind.NEED: self._on_need, OutboxKind.CLOCK: self._on_clock, OutboxKind.STARTED: self._on_started,
            OutboxKind.GATHERED: self._on_gathered, OutboxKind.DONE: self._on_done}
        handlers[kind](msg, ctx)

    def _on_need(self, msg: dict[str, Any], ctx: _LineContext) -> None:
        index = int(msg["chunk"])
        chunks, stdin = ctx.chunks, ctx.proc.stdin
        text = chunks[index] if index < len(chunks) else ""
        try:
            stdin.write(text.encode() + b"\n")
            stdin.flush()
            if index >= len(chunks):
                stdin.close()
        except (BrokenPipeError, ValueError):
            pass  # mpiexec is going away; its exit tells why

    def _on_clock(self, msg: dict[str, Any], ctx: _LineContext) -> None:
        self.clock_offsets = list(msg["offsets"])

    def _on_started(self, msg: dict[str, Any], ctx: _LineContext) -> None:
        ctx.state.started = True
        self.ranks = list(msg["ranks"])
        self._remember_local_ranks(ctx.proc, ctx.state)
        self._count_early(ctx.state)

    def _on_gathered(self, msg: dict[str, Any], ctx: _LineContext) -> None:
        """Every rank's control message of one gather (`genie.core.protocol`): case results are collected."""
        for doc in msg["messages"]:
            try:
                m = decode_message(doc)
            except ProtocolError as exc:
                raise RunFailure(f"rank 0 relayed a bad control message: {exc}") from None
            if not isinstance(m, CaseResult):
                continue
            per_rank = ctx.result.case_results.setdefault(m.case, {})
            per_rank[m.rank] = m
            if ctx.on_case and len(per_rank) == len(self.placements):
                ctx.on_case(m.case, per_rank)

    def _on_done(self, msg: dict[str, Any], ctx: _LineContext) -> None:
        ctx.state.done = True

    def _on_stderr(self, line: str, state: _Run) -> None:
        marker = line.find(plan.ERROR_MARKER)
        if marker >= 0:
            try:
                message = json.loads(line[marker + len(plan.ERROR_MARKER):])["message"]
            except (ValueError, KeyError, TypeError):
                message = line[marker + len(plan.ERROR_MARKER):]
            first = state.first_error is None
            if first:
                state.first_error = message
            try:
                doc = json.loads(line[marker + len(plan.ERROR_MARKER):])
                state.error_ranks.add(doc["rank"])
                if first and isinstance(doc.get("peer"), int):
                    state.first_blamed = doc["peer"]
                if doc.get("boot_id") == _here() and isinstance(doc.get("t_ns"), int):
                    peer = doc.get("peer")
                    state.error_times_ns.append((doc["t_ns"], peer if isinstance(peer, int) else None))
            except (ValueError, KeyError, TypeError):
                pass
            return
        self._note(line, state)

    @staticmethod
    def _note(line: str, state: _Run) -> None:
        """Keep the line for error messages; remember what hydra's termination banner says."""
        banner = _BANNER_PID.match(line)
        if banner and state.dead_pid is None:
            state.dead_pid = int(banner.group(1))
        exit_string = _EXIT_STRING.search(line)
        if exit_string and state.exit_string is None:
            state.exit_string = exit_string.group(1).strip()
        if line.strip():
            state.lines_err.append(line.strip())
            del state.lines_err[:-40]

    def _remember_local_ranks(self, proc: subprocess.Popen, state: _Run) -> None:
        """Ranks on this machine (same kernel) are registered and remembered by PID, with mpiexec's tree, and
        watched (a pidfd, beside the watch connection each holds: `RankWatch`) so that a rank dying without a
        word is named — hydra kills the others at once, and its own banner may name any of them."""
        from genie.engine.mpi.rank import boot_id

        here = boot_id()
        local = {int(r["pid"]): int(r["rank"]) for r in self.ranks if r.get("boot_id") == here}
        self._known = descendants(proc.pid)
        self._known += [p for p in (identify(pid) for pid in local) if p is not None and p not in self._known]
        if state.watch is not None:
            state.watch.watch_pids(local)
        if self.options.on_pids and local:  # in rank order, as local sessions report them (not hello order)
            self.options.on_pids(sorted(local, key=local.__getitem__))

    @staticmethod
    def _ranks_going(state: _Run, ranks: list[int]) -> None:
        """Ranks seen going, in the order the kernel saw them (`RankWatch`), until the run is done; those seen
        before rank 0's STARTED line was read are kept in order and counted when it is (`_count_early`)."""
        for rank in ranks:
            if state.done:
                continue
            if state.started:
                MpiSession._going(state, rank, time.monotonic_ns())
            else:
                state.early.append((rank, time.monotonic_ns()))

    @staticmethod
    def _count_early(state: _Run) -> None:
        """STARTED came: every rank had given its part of that gather, so a rank seen going before the line
        was read (it travels through the proxy and mpiexec; a watch connection closes straight here) went
        during the run."""
        early, state.early = state.early, []
        for rank, t_ns in early:
            MpiSession._going(state, rank, t_ns)

    @staticmethod
    def _going(state: _Run, rank: int, t_ns: int) -> None:
        if rank in state.dead:
            return
        state.dead.add(rank)
        if state.first_dead is None:
            state.first_dead, state.first_dead_ns = rank, t_ns

    # -- messages ------------------------------------------------------------------------------------------

    def _tail(self, state: _Run, lines: int = 3) -> str:
        """The last lines that say something: hydra's own stack of '[mpiexec@host] file.c:line' lines and
        MPICH's '====' banners only when nothing else was written."""
        text = [line for line in state.lines_err if not line.startswith("=")]
        useful = [line for line in text if not _HYDRA_TRACE.match(line)] or text
        return " | ".join(useful[-lines:])

    def _hosts_in(self, state: _Run) -> list[str]:
        text = "\n".join(state.lines_err)
        hosts = []
        inventory = self.launch.inventory
        if inventory is not None:
            for h in inventory.hosts:
                if h.address in text and h.name not in hosts:
                    hosts.append(f"host {h.name} ({h.address})")
        return hosts

    def _silent_death(self, state: _Run) -> str | None:
        """'rank R on host H died during the run (...)' when hydra's banner names a rank that reported nothing
        (killed, out of memory): that rank, not a peer that saw its connection close, ended the run."""
        blamed = state.first_blamed
        if blamed is not None and blamed in state.dead and blamed not in state.error_ranks:
            # the first report says the blamed rank's connection closed or reset (a timeout blames no one), and
            # that rank, seen exiting here, reported nothing itself: it died before any abort could kill it. Which
            # exit this loop noticed first proves less: a loaded machine hands it several exits at once.
            return self._died(next(r for r in self.ranks if r["rank"] == blamed), state)
        if state.first_dead is not None:  # seen here: exact
            dead = next((r for r in self.ranks if r["rank"] == state.first_dead), None)  # a watch line's number
        else:  # on another machine: hydra's banner
            dead = next((r for r in self.ranks if state.dead_pid is not None and r.get("pid") == state.dead_pid),
                        None)
        if state.first_dead is not None and any(
                t_ns < state.first_dead_ns - _ERROR_LEAD_NS and blamed != state.first_dead
                for t_ns, blamed in state.error_times_ns):
            # a rank reported its failure well before any rank here was seen dying (a reporting rank waits
            # ABORT_DELAY_S before MPI_Abort): the deaths follow its abort. A report that blames the rank that
            # died (its connection closed) is that death seen, however late this loop noticed it.
            return None
        if dead is None or dead["rank"] in state.error_ranks:
            return None
        return self._died(dead, state)

    @staticmethod
    def _died(dead: dict[str, Any], state: _Run) -> str:
        how = state.exit_string or "no error reported: killed, or crashed"
        return f"rank {dead['rank']} on host {dead['host']} died during the run ({how})"

    def _exit_message(self, code: int | None, state: _Run) -> str:
        # after DONE (written past a barrier every rank reached) a rank going is its normal exit, whenever its
        # watch connection's close came in
        silent = None if state.done else self._silent_death(state)
        if silent:
            return silent
        status = "did not exit" if code is None else f"exited with code {code}"
        phase = "after the run" if state.done else ("during the run" if state.started else
                                                     "before the ranks started")
        hosts = self._hosts_in(state)
        where = f" ({', '.join(hosts)})" if hosts else ""
        tail = self._tail(state)
        return f"{self.starter} {status} {phase}{where}" + (f": {tail}" if tail else "")

    def _timeout_message(self, state: _Run, limit: float) -> str:
        if not state.started:
            hosts = self._hosts_in(state)
            where = f" ({', '.join(hosts)})" if hosts else ""
            tail = self._tail(state)
            return (f"the MPI ranks did not start within {limit:g} s{where}"
                    + (f": {tail}" if tail else ""))
        return f"no progress from the MPI ranks for {limit:g} s"


class MpiSessions:
    """A `SessionFactory` of `MpiSession`s with one `MpiLaunch`; keeps the sessions it made, so a caller can
    report the last run's clock offsets (`clock_offsets`)."""

    def __init__(self, launch: MpiLaunch) -> None:
        self.launch = launch
        self.sessions: list[MpiSession] = []

    def check(self, placements: list[RankPlacement]) -> None:
        """Raise the InputError a session on `placements` would (srun's placement against the allocation)
        without starting anything: callers check before they create run directories."""
        if self.launch.slurm is not None:
            self.launch.slurm.rank_nodes(placements)

    def __call__(self, placements: list[RankPlacement], options: SessionOptions) -> MpiSession:
        session = MpiSession(placements, options, self.launch)
        self.sessions.append(session)
        return session

    @property
    def clock_offsets(self) -> list[dict[str, Any]]:
        return self.sessions[-1].clock_offsets if self.sessions else []
