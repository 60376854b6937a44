"""Measured mode's clock: a trace played with fixed communication times, under the replay's rules (pure).

Every communication node takes a given time (``duration_ns(op)``, e.g. the interpolated measurement); what
remains to decide is *when* it runs, and that follows ``genie replay`` (``genie.engine.program`` / ``walker``):

- one compute node at a time per rank, in the order they became ready, each for its duration;
- collectives on one *channel per process group* (the world is one more), one at a time and in program order;
  different groups progress concurrently (ASTRA-sim instead allows one collective in flight per NPU - that is
  the calibrated mode);
- sends and receives on a lane per peer and direction, in program order;
- communication overlaps compute; metadata and memory nodes finish as soon as their dependencies do.

A collective starts on a rank when it heads its channel and its dependencies are done, and runs once every
member has started it (the replay's ranks wait for each other inside the op); all members finish together
``duration`` later. (A subclass may run an op earlier, :meth:`_Player._member_started`: the fabric player runs
a big ring's connections pair by pair, :class:`astra_adapter.fabric.chains.PairStarts`.) The k-th send from a to
b pairs with the k-th receive at b from a.

With ``share_nic`` (the default), ops in flight at the same time share each rank's link, as they do on the
testbed: every op loads its ranks' transmit and receive sides (a collective all of its members' both sides, a
message the sender's transmit and the receiver's receive side) and progresses at ``1 / (largest number of
ops on any side it uses)`` of its measured speed (processor sharing). Without it, concurrent ops do not slow
each other (an ideal network).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Callable

from genie.core.collective import Algorithm, Collective
from genie.core.errors import GenieError
from genie.core.intervals import union_ns
from genie.core.alltoallv import rank_orders
from genie.core.trace import NodeKind, Trace

from astra_adapter.measurements import CommOp, comm_op, trace_splits

_EPS_NS = 1e-6


@dataclass(frozen=True)
class RankTimes:
    rank: int
    iteration_ns: int
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int
    overlap_ns: int


@dataclass(frozen=True)
class Timeline:
    ranks: tuple[RankTimes, ...]
    spans: tuple[tuple[tuple[int, float, float], ...], ...] = ()  # per rank: (node id, start_ns, end_ns)

    @property
    def iteration_ns(self) -> int:
        return max((r.iteration_ns for r in self.ranks), default=0)


class _Op:
    """One communication op shared by its members: runs once all of them started it."""

    __slots__ = ("members", "sides", "duration_ns", "started", "nodes", "remaining_ns")

    def __init__(self, members: tuple[int, ...], sides: tuple[tuple[int, int], ...] | None,
                 duration_ns: float) -> None:
        self.members = members
        # (rank, 0 = transmit / 1 = receive); None: both sides of every member (a collective)
        self.sides = sides if sides is not None else tuple((m, side) for m in members for side in (0, 1))
        self.duration_ns = duration_ns
        self.started: dict[int, float] = {}
        self.nodes: dict[int, int] = {}  # rank -> node index
        self.remaining_ns = duration_ns


class CompiledTrace:
    """A trace's static structure for the players, built once and played any number of times (the fabric
    model's ECMP draws): per rank its nodes in topological order, their children, initial dependency counts,
    lanes and the lane queues in program order, and which shared op each communication node joins (its key;
    the op's members, sides and CommOp, from the first member that names it).

    A collective's CommOp is built once per op, not once per member: a member whose node names the op as the
    one before it did (the same type, group, size, algorithm hint and split matrix) reuses its CommOp (or
    None); ``comm_op`` is pure in those, so the result is the per-member build's (a member that differs is
    built afresh)."""

    def __init__(self, trace: Trace) -> None:
        self.nodes: list[list] = []
        self.children: list[list[list[int]]] = []
        self.waiting: list[tuple[int, ...]] = []
        self.node_lane: list[list[tuple | None]] = []
        self.node_key: list[list[tuple | None]] = []
        self.queues: list[dict[tuple, tuple[int, ...]]] = []
        self.ops: dict[tuple, tuple[tuple[int, ...], tuple | None, CommOp]] = {}
        self._members: dict[str, tuple[int, ...]] = {}
        orders = rank_orders(trace)  # sorted once, for the split matrices and the compile
        self._splits = trace_splits(trace, orders)
        self._built: dict[tuple, tuple[tuple, tuple, CommOp | None]] = {}  # op key -> (node's fields, split, op)
        for i_rank, rank_trace in enumerate(trace.ranks):
            r = rank_trace.rank
            order = orders[i_rank]
            index = {n.id: i for i, n in enumerate(order)}
            children: list[list[int]] = [[] for _ in order]
            waiting = []
            queues: dict[tuple, list[int]] = {}
            node_lane, node_key = [], []
            counters: dict[tuple, int] = {}
            for i, n in enumerate(order):
                deps = [index[d] for d in n.deps if d in index]
                waiting.append(len(deps))
                for d in deps:
                    children[d].append(i)
                lane, key = self._lane(n, r, trace, counters)
                node_lane.append(lane)
                node_key.append(key)
                if lane is not None and lane[0] != "compute":
                    queues.setdefault(lane, []).append(i)
            self.nodes.append(order)
            self.children.append(children)
            self.waiting.append(tuple(waiting))
            self.node_lane.append(node_lane)
            self.node_key.append(node_key)
            self.queues.append({lane: tuple(q) for lane, q in queues.items()})
        del self._built  # only the compile needs it

    def _lane(self, node, rank: int, trace: Trace, counters: dict) -> tuple[tuple | None, tuple | None]:
        kind = node.kind
        if kind is NodeKind.COMPUTE:
            return ("compute",), None
        if kind is NodeKind.COLLECTIVE:
            group = node.process_group or ""
            lane = ("coll", group)
            k = counters[lane] = counters.get(lane, -1) + 1
            key = ("coll", group, k)
            op = self._collective_op(node, rank, trace, key)
            if op is None:
                return lane, None  # moves nothing: done when started, without waiting for the others
            if key not in self.ops:
                members = self._members.get(group)
                if members is None:
                    members = self._members[group] = tuple(trace.group(node.process_group).ranks)
                self.ops[key] = (members, None, op)
            return lane, key
        if kind in (NodeKind.SEND, NodeKind.RECV):
            send = kind is NodeKind.SEND
            lane = ("send" if send else "recv", node.peer)
            src, dst = (rank, node.peer) if send else (node.peer, rank)
            k = counters[lane] = counters.get(lane, -1) + 1
            size = int(node.size_bytes or 0)
            if not size:
                return lane, None
            key = ("p2p", src, dst, k)
            if key not in self.ops:
                self.ops[key] = ((src, dst), ((src, 0), (dst, 1)), CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, size))
            return lane, key
        return None, None

    def _collective_op(self, node, rank: int, trace: Trace, key: tuple) -> CommOp | None:
        """``comm_op`` of ``node``, rank ``rank``'s member of op ``key``: the op's CommOp built by an earlier
        member when this node names it alike (the fields ``comm_op`` reads; the split matrix, shared by an
        instance's members, compared by identity first; with one, not the member's comm_size), else built
        here."""
        split = self._splits.get((rank, node.id), ())
        # an uneven all-to-all's size is its split matrix's (comm_op), each member's own comm_size aside
        fields = (node.comm_type, node.process_group, None if split else node.size_bytes, node.algorithm)
        built = self._built.get(key)
        if built is not None and built[0] == fields and (built[1] is split or built[1] == split):
            return built[2]
        op = comm_op(node, trace, split)
        self._built[key] = (fields, split, op)
        return op


class _Player:
    def __init__(self, trace: Trace, duration_ns: Callable[[CommOp], float], share_nic: bool,
                 compiled: CompiledTrace | None = None) -> None:
        c = compiled or CompiledTrace(trace)
        self.share_nic = share_nic
        self.op_index: dict[tuple, _Op] = {key: self._new_op(members, sides, op, duration_ns)
                                           for key, (members, sides, op) in c.ops.items()}
        self.nodes, self.children = c.nodes, c.children  # read only: shared by every play of `c`
        self.waiting = [list(w) for w in c.waiting]
        self.lanes = [(node_lane, [None if k is None else self.op_index[k] for k in keys],
                       {lane: deque(q) for lane, q in queues.items()})
                      for node_lane, keys, queues in zip(c.node_lane, c.node_key, c.queues)]
        self.busy: list[set] = [set() for _ in trace.ranks]
        self.compute_ready: list[deque[int]] = [deque() for _ in trace.ranks]
        self.compute_busy = [False] * trace.num_ranks
        self.spans: list[dict[int, tuple[float, float]]] = [{} for _ in trace.ranks]
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.running: list[_Op] = []
        self.done = 0
        self.total = sum(len(n) for n in self.nodes)

    def _new_op(self, members: tuple[int, ...], sides: tuple | None, op: CommOp, duration_ns) -> _Op:
        return _Op(members, sides, float(duration_ns(op)))

    reads_member_starts = False  # a subclass that decides when an op runs (:meth:`_member_started`)

    def _member_started(self, op: _Op, rank: int, t: float) -> bool:
        """``rank`` has started ``op`` at ``t``: whether the op runs from now (called where
        :attr:`reads_member_starts`; here, and by default, once every member has started it)."""
        return len(op.started) == len(op.members)

    # ---- events ---------------------------------------------------------------------------------------
    def finish(self, rank: int, i: int, start: float, end: float) -> None:
        work = [(i, start, end)]
        node_lane = self.lanes[rank][0]
        spans, children, waiting = self.spans[rank], self.children[rank], self.waiting[rank]
        while work:
            j, s, e = work.pop()
            spans[j] = (s, e)
            self.done += 1
            for c in children[j]:
                waiting[c] -= 1
                if waiting[c] == 0:
                    if node_lane[c] is None:
                        work.append((c, e, e))
                    elif node_lane[c][0] == "compute":
                        self.compute_ready[rank].append(c)

    def pump(self, rank: int, t: float) -> None:
        node_lane, node_op, lanes = self.lanes[rank]
        busy, waiting, ready = self.busy[rank], self.waiting[rank], self.compute_ready[rank]
        progressed = True
        while progressed:
            progressed = False
            if ready and not self.compute_busy[rank]:
                i = ready.popleft()
                self.compute_busy[rank] = True
                self.seq += 1
                heapq.heappush(self.heap, (t + max(0, self.nodes[rank][i].duration_ns), self.seq, rank, i))
                self.spans[rank][i] = (t, t)
            for lane, queue in lanes.items():
                if not queue or lane in busy or waiting[queue[0]]:
                    continue
                i = queue.popleft()
                op = node_op[i]
                if op is None:
                    self.finish(rank, i, t, t)
                    progressed = True
                    continue
                self.busy[rank].add(lane)
                op.started[rank] = t
                op.nodes[rank] = i
                if self.reads_member_starts:
                    if self._member_started(op, rank, t):
                        self.running.append(op)
                elif len(op.started) == len(op.members):
                    self.running.append(op)

    def settle(self, t: float) -> None:
        """Complete the ops whose time is up (at ``t``)."""
        for op in [o for o in self.running if o.remaining_ns <= _EPS_NS]:
            self.complete(op, t)

    def complete(self, op: _Op, t: float) -> None:
        self.running.remove(op)
        for rank in op.members:
            self.leave(op, rank, t)
        for rank in op.members:
            self.pump(rank, t)

    def leave(self, op: _Op, rank: int, t: float) -> None:
        """``rank`` is done with ``op`` at ``t``: its node ends and its lane is free (pump it next)."""
        i = op.nodes[rank]
        self.busy[rank].discard(self.lanes[rank][0][i])
        self.finish(rank, i, op.started[rank], t)

    def rates(self) -> list[float]:
        if not self.share_nic:
            return [1.0] * len(self.running)
        load: dict[tuple[int, int], int] = {}
        for op in self.running:
            for side in op.sides:
                load[side] = load.get(side, 0) + 1
        return [1.0 / max(load[s] for s in op.sides) for op in self.running]

    def horizon_ns(self) -> float:
        """Time to the next op completion at the current rates (a subclass may model ops differently)."""
        self._rates = self.rates()
        return min((op.remaining_ns / rate for op, rate in zip(self.running, self._rates)), default=float("inf"))

    def advance(self, dt_ns: float) -> None:
        for op, rate in zip(self.running, self._rates):
            op.remaining_ns -= dt_ns * rate

    def play(self) -> float:
        self._begin()
        t = 0.0
        while self.done < self.total:
            self.settle(t)
            after = self._event(t)
            if after is None:
                break
            t = after
        return t

    def _begin(self) -> None:
        """The nodes ready at 0 started (the play's first pump)."""
        for rank, order in enumerate(self.nodes):
            node_lane = self.lanes[rank][0]
            for i in range(len(order)):
                if self.waiting[rank][i] == 0:
                    if node_lane[i] is None:
                        self.finish(rank, i, 0.0, 0.0)
                    elif node_lane[i][0] == "compute":
                        self.compute_ready[rank].append(i)
        for rank in range(len(self.nodes)):
            self.pump(rank, 0.0)

    def _event(self, t: float) -> float | None:
        """One event from ``t`` (after the settle): the horizon, the advance, the compute ends due; the new clock
        (None: nothing is left to happen, every node done)."""
        horizon = self.horizon_ns()
        t_heap = self.heap[0][0] if self.heap else float("inf")
        if horizon == float("inf") and t_heap == float("inf"):
            if self.done < self.total:
                raise GenieError(f"measured-mode schedule is stuck: {self._stuck()}")
            return None
        # advance by the horizon itself when an op's event comes first: late in a long play, t + a tiny
        # horizon rounds back to t, and advancing by the difference (0) would never reach the event
        op_first = t + horizon <= t_heap
        self.advance(horizon if op_first else t_heap - t)
        t = t + horizon if op_first else t_heap
        self._compute_ends(t)
        return t

    def _compute_ends(self, t: float) -> None:
        """The compute nodes ending by ``t`` finished, their ranks pumped."""
        while self.heap and self.heap[0][0] <= t:
            end, _, rank, i = heapq.heappop(self.heap)
            self.compute_busy[rank] = False
            self.finish(rank, i, self.spans[rank][i][0], end)
            self.pump(rank, end)

    def _stuck(self) -> str:
        for rank, order in enumerate(self.nodes):
            left = [n for i, n in enumerate(order) if i not in self.spans[rank]]
            if left:
                return f"rank {rank} never starts node {left[0].id} ({left[0].name})"
        return "no event left"


def play_trace(trace: Trace, duration_ns: Callable[[CommOp], float], *, share_nic: bool = True) -> Timeline:
    """Play ``trace`` with fixed communication times under the replay's rules; per-rank statistics."""
    player = _Player(trace, duration_ns, share_nic)
    return timeline_of(player)


class _GroupPlayer(_Player):
    """Ops timed by their members too (``duration_ns(op, members)``): where a group sits decides its time."""

    def __init__(self, trace: Trace, duration_ns: Callable[[CommOp, tuple[int, ...]], float], share_nic: bool) -> None:
        self._by_group = duration_ns
        super().__init__(trace, lambda op: 0.0, share_nic)

    def _new_op(self, members: tuple[int, ...], sides: tuple | None, op: CommOp, duration_ns) -> _Op:
        return _Op(members, sides, float(self._by_group(op, members)))


def play_trace_by_group(trace: Trace, duration_ns: Callable[[CommOp, tuple[int, ...]], float], *,
                        share_nic: bool = True) -> Timeline:
    """:func:`play_trace` with each op timed from its op and its members' ranks."""
    return timeline_of(_GroupPlayer(trace, duration_ns, share_nic))


def timeline_of(player: _Player) -> Timeline:
    """Play ``player`` (this module's rules, or a subclass's op model) and collect per-rank statistics."""
    player.play()
    ranks, spans = [], []
    for rank, order in enumerate(player.nodes):
        node_lane = player.lanes[rank][0]
        compute, comm, rows = [], [], []
        for i, node in enumerate(order):
            s, e = player.spans[rank][i]
            rows.append((node.id, s, e))
            lane = node_lane[i]
            if lane is None:
                continue
            (compute if lane[0] == "compute" else comm).append((s, e))
        end = max((e for _, _, e in rows), default=0.0)
        compute_ns = sum(max(0, n.duration_ns) for n in order if n.kind is NodeKind.COMPUTE)
        comm_ns = union_ns(comm)
        overlap = sum(e - s for s, e in compute) + comm_ns - union_ns(compute + comm)
        iteration = round(end)
        ranks.append(RankTimes(rank, iteration, compute_ns, round(comm_ns), max(0, iteration - compute_ns),
                               max(0, round(overlap))))
        spans.append(tuple(rows))
    return Timeline(tuple(ranks), tuple(spans))
