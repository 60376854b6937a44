"""`ThreadSession`: a `Session` whose ranks are threads of this process — no process started, no root.

Each rank thread runs the real rank program (`genie.engine.rank.serve_rank`: the job runners, the schedule
executor, the replay walker) over the real control protocol, with its control connection one end of a
`socket.socketpair()` and its data over loopback TCP (`connect_mesh`, as between processes). The orchestrator
side is the same `Orchestrator` as for rank processes. Use `thread_sessions()` wherever a `SessionFactory` is
taken (the `sessions=` of the bench, replay and diagnose services).

Threads cannot be killed, so when a run fails the session wakes every rank still running: it shuts down the
rank's control and data connections and pokes its listener with a connection no rank would make, so a rank
blocked anywhere fails at once, and joins them all before `run` returns.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Callable

from genie.core.errors import RunFailure
from genie.core.placement import RankPlacement
from genie.core.protocol import CaseResult, Job
from genie.engine.control import ControlClosed
from genie.engine.rank import ControlChannel, serve_rank
from genie.engine.session import Orchestrator, Session, SessionFactory, SessionOptions, SessionResult, read_hello
from genie.engine.links import listen_socket

_POKE = struct.pack("!II", 0xFFFFFFFF, 0xFFFFFFFF)  # a link header from no rank on no channel: refused


class _RankThread:
    """One rank: its thread, its control socketpair, its listener and the data connections it opens."""

    def __init__(self, placement: RankPlacement) -> None:
        self.rank = placement.rank
        self.ours, self.theirs = socket.socketpair()
        self.listener = listen_socket(placement.address)
        self.address = self.listener.getsockname()
        self.links: dict = {}  # (channel, peer) -> PeerLink, filled by the rank
        self.exit_code: int | None = None
        self.crash: BaseException | None = None
        # the rank closes its own copy of the listener when it connected (or failed): this one stays open, so
        # a peer connecting late never sees a refused connection (it would retry until its connect timeout)
        self.thread = threading.Thread(target=self._main, args=(self.listener.dup(),), daemon=True,
                                       name=f"genie-rank-{self.rank}")

    def _main(self, listener: socket.socket) -> None:
        try:
            self.exit_code = serve_rank(ControlChannel(self.theirs), self.rank, listener, self.links)
        except BaseException as exc:  # serve_rank reports what it can; this is what it could not
            self.crash = exc
        finally:
            _shut(self.theirs)  # as a process's exit closes its end: the orchestrator sees the rank go

    def wake(self) -> None:
        """Make the rank fail wherever it waits: control, data, or accepting its peers."""
        _shut(self.ours)
        for link in list(self.links.values()):
            for sock in link.sockets():
                _shut(sock)
        try:
            with socket.create_connection(self.address, timeout=0.2) as poke:
                poke.sendall(_POKE)
        except OSError:
            pass

    def close(self) -> None:
        for sock in (self.ours, self.theirs, self.listener):
            sock.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class ThreadSession:
    """Runs one job with every rank a thread of this process (placements in this namespace: loopback)."""

    def __init__(self, placements: list[RankPlacement], options: SessionOptions = SessionOptions(), *,
                 startup_timeout_s: float = 60.0, stop_timeout_s: float = 30.0) -> None:
        namespaced = [p.rank for p in placements if p.netns is not None]
        if namespaced:
            raise RunFailure(f"in-process ranks run in this namespace: ranks {namespaced} are placed in testbed "
                             "namespaces (use rank processes there)")
        self.placements = sorted(placements, key=lambda p: p.rank)
        self.options = options
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._ranks: dict[int, _RankThread] = {}

    def run(self, job: Job | Callable[[int], Job],
            on_case: Callable[[int, dict[int, CaseResult]], None] | None = None) -> SessionResult:
        """Run `job` (the same for every rank, or a function of the rank) to the end, as `RankSession.run`;
        every rank thread has ended when this returns or raises."""
        try:
            result = self._run(job, on_case)
        except BaseException:
            self._stop()
            raise
        running = self._stop()
        if running:
            raise RunFailure(f"rank threads {running} did not stop within {self.stop_timeout_s:g} s")
        return result

    def _run(self, job: Job | Callable[[int], Job],
             on_case: Callable[[int, dict[int, CaseResult]], None] | None) -> SessionResult:
        for p in self.placements:
            self._ranks[p.rank] = _RankThread(p)
        for r in self._ranks.values():
            r.thread.start()
        addresses = {}
        for rank, r in self._ranks.items():
            try:
                hello = read_hello(r.ours, self.startup_timeout_s)
            except (ControlClosed, ConnectionError, socket.timeout):
                raise self.dead_rank_error(rank, "startup") from None
            addresses[rank] = (r.address[0], hello.port)
        options = self.options
        control = Orchestrator({rank: r.ours for rank, r in self._ranks.items()}, self,
                               idle_timeout_s=options.idle_timeout_s, fault_hooks=options.fault_hooks,
                               on_barrier=options.on_barrier)
        control.setup(addresses, job, socket_buffer_bytes=options.socket_buffer_bytes, spin_s=options.spin_s,
                      congestion=options.congestion)
        result = control.serve(on_case)
        control.release()
        self._join(time.monotonic() + self.stop_timeout_s)
        return result

    # ---- RankHealth

    def check_alive(self, during: str) -> None:
        for rank, r in self._ranks.items():
            if not r.thread.is_alive():
                raise self.dead_rank_error(rank, during)

    def dead_rank_error(self, rank: int, during: str) -> RunFailure:
        r = self._ranks[rank]
        r.thread.join(timeout=2.0)
        if r.crash is not None:
            how = f"raised {type(r.crash).__name__}: {r.crash}"
        elif r.thread.is_alive():
            how = "closed its control connection"
        else:
            how = "ended" if r.exit_code is None else f"ended with code {r.exit_code}"
        return RunFailure(f"rank {rank} (thread) {how} during {during}")

    # ---- stopping

    def _join(self, deadline: float) -> list[_RankThread]:
        """Join the rank threads until `deadline`; the ones still running."""
        for r in self._ranks.values():
            r.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        return [r for r in self._ranks.values() if r.thread.is_alive()]

    def _stop(self) -> list[int]:
        """Wake and join every rank thread still running (a failed run), then close every socket; the ranks
        whose thread is still running after `stop_timeout_s` (none, unless a rank is stuck outside a socket)."""
        deadline = time.monotonic() + self.stop_timeout_s
        running = [r for r in self._ranks.values() if r.thread.is_alive()]
        while running and time.monotonic() < deadline:
            for r in running:  # again each round: a rank may have opened connections since
                r.wake()
            running = self._join(min(deadline, time.monotonic() + 0.2))
        for r in self._ranks.values():
            r.close()
        return [r.rank for r in running]


def thread_sessions() -> SessionFactory:
    """Sessions whose ranks are threads of this process (`ThreadSession`)."""

    def make(placements: list[RankPlacement], options: SessionOptions) -> Session:
        return ThreadSession(placements, options)

    return make
