"""Walks one rank's replay program: compute waited out, communication sent for real, overlapping.

A single thread drives everything. Lanes (see `genie.engine.program`): one compute node at a time; one
collective at a time per channel, in program order; one send and one receive at a time per peer, in program
order. A node starts when its dependencies are done and it heads its lane. This module holds that logic only;
how a step's bytes move is a `StepMover`'s job:

* `genie.engine.socket_mover.SocketMover` — genie's TCP connections, a send and a receive connection per
  (channel, peer), driven by one
  epoll set (edge-triggered, as in `SocketTransport`) holding a timerfd for the running compute node;
* `genie.engine.mpi.mover.MpiMover` — MPI nonblocking point-to-point (``--transport mpi``), polled with
  Testall between compute wake-ups.

Compute keeps time on an oversubscribed machine by sleeping most of the duration (timerfd, 1 ns slack) and
spinning the last `spin_ns` with sched_yield, so a late wake-up does not stretch the node. Time is read from,
and spun on, a `genie.engine.clock.Clock` (the real one by default; `FakeClock` with
`genie.engine.fake_mover.FakeMover` walks programs in virtual time, with no process and no sleeping).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

from genie.core.program import Lane, ProgramNode, RankProgram
from genie.core.schedule import Recv, Send, Step
from genie.engine.clock import DEFAULT_SPIN_NS, MONOTONIC, Clock, minimise_timer_slack
from genie.engine.program import cached_schedule, clear_to_send
from genie.engine.transport import PeerFailure


@dataclass(frozen=True)
class NodeRecord:
    node_id: int
    start_ns: int
    end_ns: int


class Exchange(Protocol):
    """One schedule step's sends and receives in flight."""

    def progress(self) -> bool:
        """Move what can move without waiting; True when the step is complete."""

    def describe_pending(self) -> str:
        """What is still pending, naming the peers: ``receiving from rank 2 (0/4096 bytes)``."""


class StepMover(Protocol):
    """Moves the bytes of the walker's steps. `begin` starts a step of a run; the walker `watch`es a run whose
    step did not complete at once and `unwatch`es it when it did; `wait` returns the watched runs whose step
    completed, at the latest after `wait_s` seconds or at `wake_ns` (monotonic; the compute timer)."""

    def begin(self, run: "CommRun", step: Step) -> Exchange: ...

    def watch(self, run: "CommRun") -> None: ...

    def unwatch(self, run: "CommRun") -> None: ...

    def wait(self, wait_s: float, wake_ns: int | None) -> list["CommRun"]: ...

    def close(self) -> None: ...


def lane_key(node: ProgramNode) -> tuple:
    """The lane a communication node runs on: its channel for a collective, (direction, peer) for p2p."""
    return ("coll", node.channel) if node.lane is Lane.COLLECTIVE else (node.lane, node.peer)


def node_steps(node: ProgramNode, rank: int) -> tuple[Step, ...]:
    """The schedule steps of a communication node on `rank` (a send or receive is one single-transfer step); a
    collective's start with its clear-to-send step where it has one (`genie.engine.program.clear_to_send`)."""
    if node.lane is Lane.COLLECTIVE:
        if not node.op.sends_messages:
            return ()
        steps = cached_schedule(node.op).for_rank(rank).steps
        tokens = clear_to_send(node.op, rank)
        return steps if tokens is None else (tokens, *steps)
    if node.lane is Lane.SEND:
        return (Step(sends=(Send(node.peer, 0, node.size_bytes),)),)
    return (Step(recvs=(Recv(node.peer, 0, node.size_bytes),)),)


class CommRun:
    """One communication node in flight: its steps, executed in order by the mover."""

    __slots__ = ("node", "steps", "index", "exchange", "start_ns", "deadline_s")

    def __init__(self, node: ProgramNode, steps: tuple[Step, ...], start_ns: int, deadline_s: float) -> None:
        self.node = node
        self.steps = steps
        self.index = 0
        self.exchange: Exchange | None = None
        self.start_ns = start_ns
        self.deadline_s = deadline_s

    def advance(self, mover: StepMover) -> bool:
        """Progress through as many steps as complete without waiting; True when the node is done."""
        while True:
            if self.exchange is None:
                if self.index >= len(self.steps):
                    return True
                self.exchange = mover.begin(self, self.steps[self.index])
            if not self.exchange.progress():
                return False
            self.exchange = None
            self.index += 1


class ProgramWalker:
    """Walks `program` with `mover` moving the bytes (the walker closes the mover), on `clock`."""

    def __init__(self, program: RankProgram, mover: StepMover, *, timeout_s: float = 60.0,
                 spin_ns: int = DEFAULT_SPIN_NS, clock: Clock = MONOTONIC) -> None:
        self.program = program
        self.clock = clock
        self.rank = program.rank
        self.timeout_s = timeout_s
        self.spin_ns = spin_ns
        self.mover = mover
        minimise_timer_slack()

    def close(self) -> None:
        self.mover.close()

    # ------------------------------------------------------------------------------------------ walking
    def run(self, start_ns: int | None = None, *,
            compute_factor: Callable[[int], float] | None = None) -> list[NodeRecord]:
        """Walk the whole program once from `start_ns` (monotonic; default now); a record per node.
        `compute_factor(ideal start ns)` stretches compute nodes (a straggler fault, `genie.faults`).

        Compute keeps an ideal clock: a compute node's deadline is `ideal start + duration`, where the ideal
        start is when it became ready (its last dependency's end; for a compute dependency, that node's
        ideal end, even when it ended later on the wall clock) — so a late wake-up or the interpreter's gap between two back-to-back compute nodes is
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
            if n.lane in (Lane.COLLECTIVE, Lane.SEND, Lane.RECV):
                lanes.setdefault(lane_key(n), deque()).append(n.id)
        busy_lanes: set[tuple] = set()
        records: dict[int, NodeRecord] = {}
        running: dict[tuple, CommRun] = {}
        compute: tuple[int, int, int, int] | None = None  # (node id, start, deadline, ideal end)
        now = self.clock.monotonic_ns
        mover = self.mover

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
                compute = (nid, start, max(start, ideal_end), ideal_end)
                lane_ideal_end = ideal_end
            for key, queue in lanes.items():
                if key in busy_lanes or not queue or remaining[queue[0]] != 0:
                    continue
                node = nodes[queue.popleft()]
                run = CommRun(node, node_steps(node, self.rank), now(), now() / 1e9 + self.timeout_s)
                if run.advance(mover):
                    finish(node.id, run.start_ns, now())
                else:
                    busy_lanes.add(key)
                    running[key] = run
                    mover.watch(run)
            if len(records) >= total:
                break
            if compute is not None:
                t = now()
                if t < compute[2] and not running and t >= compute[2] - self.spin_ns:
                    self.clock.spin_until(compute[2])  # nothing else to drive: spin the last stretch
                    t = now()
                if t >= compute[2]:
                    nid, start, _deadline, ideal_end = compute
                    compute = None
                    # children become ready at the ideal end, not at the (later) wall end: a late wake-up
                    # or the interpreter's per-node overhead is repaid by the compute that follows
                    finish(nid, start, t, ideal_end)
                    continue
            if not running and compute is None:
                if compute_ready or any(q and remaining[q[0]] == 0 for k, q in lanes.items()):
                    continue
                raise PeerFailure(f"rank {self.rank}: replay is stuck: no node can start "
                                  f"({total - len(records)} of {total} left)")
            # wait for the mover: a step completed, the compute timer, or the nearest op deadline
            wait_s = 1.0
            if running:
                wait_s = min(wait_s, max(0.0, min(r.deadline_s for r in running.values()) - now() / 1e9))
            if compute is not None and now() >= compute[2] - self.spin_ns:
                wait_s = 0.0  # spinning the end of a compute node while communication is in flight
            wake_ns = None if compute is None else max(compute[1], compute[2] - self.spin_ns)
            for run in mover.wait(wait_s, wake_ns):
                run.exchange = None
                run.index += 1
                mover.unwatch(run)
                if run.advance(mover):
                    key = lane_key(run.node)
                    del running[key]
                    busy_lanes.discard(key)
                    finish(run.node.id, run.start_ns, now())
                else:
                    mover.watch(run)
            mono = now() / 1e9
            for run in running.values():
                if mono > run.deadline_s:
                    pending = run.exchange.describe_pending() if run.exchange else ""
                    raise PeerFailure(f"rank {self.rank}: {run.node.name} (node {run.node.id}) timed out after "
                                      f"{self.timeout_s:g} s {pending}")
        return [records[n.id] for n in self.program.nodes]
