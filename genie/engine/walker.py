"""Walks one rank's replay program: compute waited out, communication sent for real, overlapping.

A single thread drives everything from one epoll set: the sockets of every channel (edge-triggered, as in
`SocketTransport`), and a timerfd for the running compute node. Lanes (see `genie.engine.program`): one compute
node at a time; one collective at a time per channel, in program order; one send and one receive at a time per
peer, in program order. A node starts when its dependencies are done and it heads its lane.

Compute keeps time on an oversubscribed machine by sleeping most of the duration (timerfd, 1 ns slack) and
spinning the last `spin_ns` with sched_yield, so a late wake-up does not stretch the node.
"""

from __future__ import annotations

import select
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from genie.core.schedule import Step
from genie.engine.clock import DeadlineTimer, minimise_timer_slack, spin_until
from genie.engine.program import Lane, ProgramNode, RankProgram, cached_schedule
from genie.engine.transport import WATCH_IN, WATCH_IN_OUT, PeerFailure, StepExchange, Transfer

DEFAULT_SPIN_NS = 200_000


@dataclass(frozen=True)
class NodeRecord:
    node_id: int
    start_ns: int
    end_ns: int


class _CommRun:
    """One communication node in flight: its steps, executed in order over its channel's sockets."""

    __slots__ = ("node", "steps", "index", "exchange", "sockets", "start_ns", "deadline_s", "fds_out")

    def __init__(self, node: ProgramNode, steps: tuple[Step, ...], sockets: dict[int, socket.socket],
                 start_ns: int, deadline_s: float) -> None:
        self.node = node
        self.steps = steps
        self.index = 0
        self.exchange: StepExchange | None = None
        self.sockets = sockets
        self.start_ns = start_ns
        self.deadline_s = deadline_s
        self.fds_out: list[int] = []

    def advance(self, rank: int, window: memoryview) -> bool:
        """Progress through as many steps as complete without waiting; True when the node is done."""
        while True:
            if self.exchange is None:
                if self.index >= len(self.steps):
                    return True
                step = self.steps[self.index]
                self.exchange = StepExchange(rank, self.sockets,
                                             [Transfer(s.peer, s.size_bytes) for s in step.sends],
                                             [Transfer(r.peer, r.size_bytes) for r in step.recvs], window)
            if not self.exchange.progress():
                return False
            self.exchange = None
            self.index += 1


class ProgramWalker:
    def __init__(self, program: RankProgram, sockets: dict[tuple[int, int], socket.socket], *,
                 timeout_s: float = 60.0, spin_ns: int = DEFAULT_SPIN_NS, window_bytes: int = 1 << 20) -> None:
        self.program = program
        self.rank = program.rank
        self.timeout_s = timeout_s
        self.spin_ns = spin_ns
        self.window = memoryview(bytearray(window_bytes))
        self.channels: dict[int, dict[int, socket.socket]] = {}
        self.epoll = select.epoll()
        self.fd_users: dict[int, set[_CommRun]] = {}
        self.fd_peer: dict[int, int] = {}
        for (channel, peer), sock in sockets.items():
            sock.settimeout(None)  # attempts use MSG_DONTWAIT (see genie.engine.transport)
            self.channels.setdefault(channel, {})[peer] = sock
            self.epoll.register(sock.fileno(), WATCH_IN)
            self.fd_users[sock.fileno()] = set()
            self.fd_peer[sock.fileno()] = peer
        self.timer = DeadlineTimer()
        self.epoll.register(self.timer.fd, select.EPOLLIN)
        minimise_timer_slack()

    def close(self) -> None:
        self.epoll.close()
        self.timer.close()

    # ------------------------------------------------------------------------------------------ walking
    def run(self, start_ns: int | None = None, *,
            compute_factor: Callable[[int], float] | None = None) -> list[NodeRecord]:
        """Walk the whole program once from `start_ns` (monotonic; default now); a record per node.
        `compute_factor(ideal start ns)` stretches compute nodes (a straggler fault, `genie.faults`).

        Compute keeps an ideal clock: a compute node's deadline is `ideal start + duration`, where the ideal
        start is when it became ready (its last dependency's end; for a compute dependency, that node's
        deadline) — so a late wake-up or the interpreter's gap between two back-to-back compute nodes is
        made up by the next one instead of accumulating, as a GPU stream would not have lost that time.
        A node never ends before it starts; communication delays are never made up."""
        nodes = {n.id: n for n in self.program.nodes}
        remaining = {n.id: sum(1 for d in n.deps if d in nodes) for n in self.program.nodes}
        children: dict[int, list[int]] = {}
        for n in self.program.nodes:
            for d in n.deps:
                if d in nodes:
                    children.setdefault(d, []).append(n.id)
        lanes: dict[tuple, deque[int]] = {}
        compute_ready: deque[int] = deque()
        for n in self.program.nodes:  # program (topological) order within each comm lane
            if n.lane is Lane.COLLECTIVE:
                lanes.setdefault(("coll", n.channel), deque()).append(n.id)
            elif n.lane in (Lane.SEND, Lane.RECV):
                lanes.setdefault((n.lane, n.peer), deque()).append(n.id)
        busy_lanes: set[tuple] = set()
        records: dict[int, NodeRecord] = {}
        running: dict[tuple, _CommRun] = {}
        compute: tuple[int, int, int] | None = None  # (node id, start, deadline)
        now = time.monotonic_ns

        origin = now() if start_ns is None else start_ns
        ready_at: dict[int, int] = {}  # ideal time each node became ready
        lane_ideal_end = origin  # ideal end of the last compute node

        def finish(node_id: int, start: int, end: int, ideal_end: int | None = None) -> None:
            work = [(node_id, start, end, end if ideal_end is None else ideal_end)]
            while work:
                nid, s, e, ideal = work.pop()
                records[nid] = NodeRecord(nid, s, e)
                for child in children.get(nid, ()):
                    ready_at[child] = max(ready_at.get(child, origin), ideal)
                    remaining[child] -= 1
                    if remaining[child] == 0:
                        c = nodes[child]
                        if c.lane is Lane.NONE:
                            work.append((child, e, e, ready_at[child]))
                        elif c.lane is Lane.COMPUTE:
                            compute_ready.append(child)

        for n in self.program.nodes:
            if remaining[n.id] == 0:
                if n.lane is Lane.NONE:
                    finish(n.id, origin, origin)
                elif n.lane is Lane.COMPUTE:
                    compute_ready.append(n.id)
        total = len(nodes)
        while len(records) < total:
            # start whatever can start
            if compute is None and compute_ready:
                nid = compute_ready.popleft()
                start = now()
                ideal_start = max(ready_at.get(nid, origin), lane_ideal_end)
                duration = nodes[nid].duration_ns
                if compute_factor is not None:
                    duration = round(duration * compute_factor(ideal_start))
                ideal_end = ideal_start + duration
                compute = (nid, start, max(start, ideal_end))
                lane_ideal_end = ideal_end
                self.timer.set(max(start, compute[2] - self.spin_ns))
            for key, queue in lanes.items():
                if key in busy_lanes or not queue or remaining[queue[0]] != 0:
                    continue
                node = nodes[queue.popleft()]
                run = self._start(node)
                if run.advance(self.rank, self.window):
                    finish(node.id, run.start_ns, now())
                else:
                    busy_lanes.add(key)
                    running[key] = run
                    self._watch(run)
            if len(records) >= total:
                break
            if compute is not None:
                t = now()
                if t < compute[2] and not running and t >= compute[2] - self.spin_ns:
                    spin_until(compute[2])  # nothing else to drive: spin the last stretch
                    t = now()
                if t >= compute[2]:
                    nid, start, deadline = compute
                    compute = None
                    self.timer.set(None)
                    finish(nid, start, t, deadline)
                    continue
            if not running and compute is None:
                if compute_ready or any(q and remaining[q[0]] == 0 for k, q in lanes.items()):
                    continue
                raise PeerFailure(f"rank {self.rank}: replay is stuck: no node can start "
                                  f"({total - len(records)} of {total} left)")
            # wait for socket readiness, the compute timer, or the nearest op deadline
            wait_s = 1.0
            if running:
                wait_s = min(wait_s, max(0.0, min(r.deadline_s for r in running.values()) - time.monotonic()))
            if compute is not None and now() >= compute[2] - self.spin_ns:
                wait_s = 0.0  # spinning the end of a compute node while communication is in flight
            for fd, ev in self.epoll.poll(wait_s):
                if fd == self.timer.fd:
                    self.timer.clear()
                    continue
                peer = self.fd_peer[fd]
                for run in list(self.fd_users.get(fd, ())):
                    ex = run.exchange
                    if ex is not None and ex.on_ready(peer, ev):
                        run.exchange = None
                        run.index += 1
                        self._unwatch(run)
                        if run.advance(self.rank, self.window):
                            key = self._lane_key(run.node)
                            del running[key]
                            busy_lanes.discard(key)
                            finish(run.node.id, run.start_ns, now())
                        else:
                            self._watch(run)
            mono = time.monotonic()
            for run in running.values():
                if mono > run.deadline_s:
                    pending = run.exchange.describe_pending() if run.exchange else ""
                    raise PeerFailure(f"rank {self.rank}: {run.node.name} (node {run.node.id}) timed out after "
                                      f"{self.timeout_s:g} s {pending}")
        return [records[n.id] for n in self.program.nodes]

    # ------------------------------------------------------------------------------------------ plumbing
    @staticmethod
    def _lane_key(node: ProgramNode) -> tuple:
        return ("coll", node.channel) if node.lane is Lane.COLLECTIVE else (node.lane, node.peer)

    def _start(self, node: ProgramNode) -> _CommRun:
        sockets = self.channels.get(node.channel, {})
        if node.lane is Lane.COLLECTIVE:
            steps = cached_schedule(node.op).for_rank(self.rank).steps if node.op.size_bytes else ()
        elif node.lane is Lane.SEND:
            steps = (Step(sends=(_send(node),)),)
        else:
            steps = (Step(recvs=(_recv(node),)),)
        return _CommRun(node, steps, sockets, time.monotonic_ns(), time.monotonic() + self.timeout_s)

    def _watch(self, run: _CommRun) -> None:
        """Register `run` as a user of its sockets; watch write readiness where its sends are blocked."""
        for sock in run.sockets.values():
            self.fd_users[sock.fileno()].add(run)
        if run.exchange is not None:
            run.fds_out = [run.sockets[p].fileno() for p in run.exchange.pending_out]
            for fd in run.fds_out:
                self.epoll.modify(fd, WATCH_IN_OUT)

    def _unwatch(self, run: _CommRun) -> None:
        for sock in run.sockets.values():
            self.fd_users[sock.fileno()].discard(run)
        for fd in run.fds_out:
            self.epoll.modify(fd, WATCH_IN)
        run.fds_out = []


def _send(node: ProgramNode):
    from genie.core.schedule import Send

    return Send(node.peer, 0, node.size_bytes)


def _recv(node: ProgramNode):
    from genie.core.schedule import Recv

    return Recv(node.peer, 0, node.size_bytes)
