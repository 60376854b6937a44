"""ASTRA-sim's system layer: collectives -> chunk streams -> per-dimension queues -> phases.

``Sys::generate_collective`` cuts a collective into chunk streams (:mod:`astra_adapter.collective_plan`); each
phase takes a queue of its dimension and a ring direction from the level's allocators (``QueueLevelHandler``:
:class:`~astra_adapter.collective_plan.QueuePick`); a stream enters its first phase's queue (``Sys::insert_stream``:
after running streams and after streams of higher or equal priority; LIFO gives newer collectives higher
priority). At most ``ceil(active-chunks-per-dimension / queues-per-dim)`` streams run per queue. An
anticlockwise ring or direct phase runs over its members in reverse order (each sends to the previous one). A phase ends when
:class:`~astra_adapter.phase_sim.PhaseTimer` says so, once every member of its group has started it; the
stream then moves to its next phase's queue (``proceed_to_next_vnet_baseline``) and the collective finishes
with its last stream.
"""

from __future__ import annotations

import math
from typing import Callable

from genie.core.errors import GenieError

from astra_adapter.collective_plan import DIRECT_LIKE, RING_LIKE, CommKind, PhaseSpec, QueuePick, chunk_sizes, \
    group_phases, logical_dims, world_phases
from astra_adapter.config import ImplKind, InterDimensionScheduling, SchedulingPolicy, SystemConfig
from astra_adapter.dbt import TreeType
from astra_adapter.network import AnalyticalNetwork
from astra_adapter.live_phases import LivePhases
from astra_adapter.phase_sim import PhaseTimer
from astra_adapter.work import OpKind, RankWork, WorkNode


class Collective:
    __slots__ = ("node", "comm", "key", "remaining", "members")

    def __init__(self, node: int, comm: CommKind, key: tuple, remaining: int,
                 members: tuple[int, ...] | None) -> None:
        self.node, self.comm, self.key, self.remaining, self.members = node, comm, key, remaining, members


class Stream:
    __slots__ = ("coll", "chunk", "phases", "queues", "reversed", "trees", "next_phase", "priority", "initialized",
                 "queue")

    def __init__(self, coll: Collective, chunk: int, phases: tuple[PhaseSpec, ...], queues: tuple[int, ...],
                 reversed_: tuple[bool, ...], trees: tuple[TreeType, ...], priority: int) -> None:
        self.coll, self.chunk, self.phases, self.queues, self.trees = coll, chunk, phases, queues, trees
        self.reversed = reversed_  # per phase: anticlockwise (a ring or direct phase runs its members reversed)
        self.next_phase, self.priority, self.initialized, self.queue = 0, priority, False, -1


class SysState:
    """One rank's queues and the counters ASTRA-sim keeps per ``Sys``."""

    __slots__ = ("rank", "q", "queues", "running", "allocators", "priority_counter", "rr_rotation", "dbt_calls",
                 "ordinals", "seen_plans")

    def __init__(self, rank: int, queues_per_level: int, levels: int) -> None:
        self.rank, self.q = rank, queues_per_level
        self.queues: list[list[Stream]] = [[] for _ in range(levels * queues_per_level)]
        self.running = [0] * (levels * queues_per_level)
        # per level, QueueLevelHandler's allocator, first_allocator and last_allocator
        self.allocators = [{QueuePick.NEXT: 0, QueuePick.FIRST: 0, QueuePick.LAST: queues_per_level // 2}
                           for _ in range(levels)]
        self.priority_counter = 0
        self.rr_rotation = 0
        self.dbt_calls: dict[tuple, int] = {}
        self.ordinals: dict[str, int] = {}
        self.seen_plans: set = set()

    def take_queue(self, level: int, pick: QueuePick) -> tuple[int, bool]:
        """(queue index, anticlockwise) from the level's allocator ``pick`` (``QueueLevelHandler``)."""
        q, allocator = self.q, self.allocators[level]
        i = allocator[pick]
        if pick is QueuePick.NEXT:
            allocator[pick] = (i + 1) % q
            anticlockwise = q > 1 and i >= q // 2
        elif pick is QueuePick.FIRST:
            allocator[pick] = 0 if i + 1 >= q // 2 else i + 1
            anticlockwise = False
        else:
            allocator[pick] = q // 2 if i + 1 >= q else i + 1
            anticlockwise = True
        return level * q + i, anticlockwise


class _Rendezvous:
    __slots__ = ("members", "starts", "streams", "order")

    def __init__(self, members: tuple[int, ...]) -> None:
        self.members = members
        self.starts: list[int | None] = [None] * len(members)
        self.streams: list[Stream | None] = [None] * len(members)
        self.order: list[int] = []  # member indices in the order they started


class _TwinWait:
    """A representative's phase waiting for the starts of its members' classes."""

    __slots__ = ("rank", "stream", "phase", "members", "network_dim", "keys", "missing")

    def __init__(self, rank: int, stream: Stream, phase: int, members: tuple[int, ...], network_dim: int | None,
                 keys: list[tuple]) -> None:
        self.rank, self.stream, self.phase, self.members, self.network_dim = rank, stream, phase, members, network_dim
        self.keys, self.missing = keys, 0


class Twins:
    """Which representative simulates each rank (:mod:`astra_adapter.symmetry`), and every rank's collectives.

    A member's start of a phase is its representative's start of the same node, chunk and phase: twins have
    equal node lists, and a member's k-th collective on a group is the node the group's k-th stream belongs to.
    """

    def __init__(self, representatives: tuple[int, ...], work: tuple[RankWork, ...]) -> None:
        self.representatives, self.work = representatives, work
        self._collectives: dict[int, dict[str, list[int]]] = {}

    def collective_node(self, rank: int, group: str, ordinal: int, empty: Callable) -> int:
        by_group = self._collectives.get(rank)
        if by_group is None:
            w = self.work[rank]
            by_group = self._collectives[rank] = {}
            for i, node in enumerate(w.nodes):
                if node.op is OpKind.COLLECTIVE and not empty(rank, node, w.groups[i]):
                    by_group.setdefault(w.groups[i], []).append(i)
        nodes = by_group.get(group, [])
        if ordinal >= len(nodes):
            raise GenieError(f"rank {rank} has no collective #{ordinal} on group {group or 'world'} "
                             "(its peers do; ASTRA-sim would hang)")
        return nodes[ordinal]


_DIRECTED = (*RING_LIKE, *DIRECT_LIKE)  # the implementations ASTRA-sim gives a direction (Ring, AllToAll)
PhaseDone = Callable[[int, int, Stream], None]  # (tick, rank, stream)
CollectiveDone = Callable[[int, int, int], None]  # (tick, rank, node index)


class CollectiveScheduler:
    """Collectives of all ranks; with ``twins``, only representatives run and stand for their classes."""

    def __init__(self, system: SystemConfig, network: AnalyticalNetwork, groups: dict[str, tuple[int, ...]],
                 timer: PhaseTimer, phase_done: PhaseDone, collective_done: CollectiveDone,
                 queues_per_dim: int = 1, twins: Twins | None = None, live: LivePhases | None = None) -> None:
        self.system, self.network, self.groups, self.timer = system, network, groups, timer
        self.live = live
        self.phase_done, self.collective_done = phase_done, collective_done
        self.q, self.twins = queues_per_dim, twins
        self.threshold = math.ceil(system.active_chunks_per_dimension / queues_per_dim)
        self.rendezvous: dict[tuple, _Rendezvous] = {}
        self.twin_starts: dict[tuple, int] = {}  # (representative, node, chunk, phase) -> tick it started
        self.twin_waits: dict[tuple, list[_TwinWait]] = {}
        self.twin_sizes: dict[tuple, int] = {}  # (representative, node, chunk, phase) -> its phase's bytes
        self.log: list[tuple[int, str]] = []
        self._dims: dict[CommKind, tuple] = {}
        self._phases: dict[tuple, tuple[PhaseSpec, ...]] = {}
        self._index: dict[tuple[int, ...], dict[int, int]] = {}
        # (rank, logical dim, collective, reversed) -> a world phase's members, network dim, and index
        self._placed: dict[tuple, tuple[tuple[int, ...], int | None, dict[int, int]]] = {}

    def new_state(self, rank: int) -> SysState:
        levels = self.network.dims_count
        return SysState(rank, self.q, levels)

    # ---- planning ---------------------------------------------------------------------------------------
    def dims(self, comm: CommKind) -> tuple:
        dims = self._dims.get(comm)
        if dims is None:
            dims = self._dims[comm] = logical_dims(self.system, comm, self.network.config.npus_per_dim)
        return dims

    def group_ring(self, rank: int, node: WorkNode, group: str) -> tuple[int, ...] | None:
        """A communicator-group ring's members, or None when the collective runs on the world's dims."""
        if not group:
            return None
        members = self.groups.get(group)
        if members is None:
            raise GenieError(f"rank {rank} node {node.node_id}: process group {group!r} is not defined")
        if rank not in members:
            raise GenieError(f"rank {rank} node {node.node_id}: not a member of process group {group!r}")
        return None if len(members) == self.network.npus_count else members

    def phases(self, comm: CommKind, chunk: int, involved: tuple[bool, ...] | None, rotation: int,
               members: tuple[int, ...] | None) -> tuple[PhaseSpec, ...]:
        key = (comm, chunk, involved, rotation, None if members is None else len(members))
        phases = self._phases.get(key)
        if phases is None:
            if members is None:
                phases = world_phases(self.system, comm, chunk, self.dims(comm), involved or (), rotation)
            else:
                phases = group_phases(self.system, comm, chunk, len(members))
            self._phases[key] = phases
        return phases

    def is_empty(self, rank: int, node: WorkNode, group: str) -> bool:
        """No phase at all (zero bytes, or no dimension with more than one NPU): finishes when issued."""
        chunks = chunk_sizes(node.size_bytes, self.system.preferred_dataset_splits)
        if not chunks:
            return True
        members = self.group_ring(rank, node, group)
        return not self.phases(node.comm, chunks[0], node.involved_dims, 0, members)

    # ---- generating streams -------------------------------------------------------------------------------
    def _priority(self, s: SysState, node: WorkNode) -> int:
        policy = self.system.scheduling_policy
        if policy is SchedulingPolicy.EXPLICIT:
            return node.priority
        value = s.priority_counter
        s.priority_counter += 1 if policy is SchedulingPolicy.LIFO else -1
        return value

    def issue(self, s: SysState, index: int, node: WorkNode, group: str, t: int) -> None:
        members = self.group_ring(s.rank, node, group)
        ordinal = s.ordinals.get(group, 0)
        s.ordinals[group] = ordinal + 1
        if members is not None and (node.comm, group) not in s.seen_plans:
            s.seen_plans.add((node.comm, group))
            n = len(members)
            self.log.append((t, f"[system::topology::RingTopology] [info] custom ring, id: {s.rank}, dimension: "
                                f"local total nodes in ring: {n} index in ring: {members.index(s.rank)} "
                                f"total nodes in ring {n}"))
        chunks = chunk_sizes(node.size_bytes, self.system.preferred_dataset_splits)
        coll = Collective(index, node.comm, (group, ordinal), len(chunks), members)
        priority = self._priority(s, node)
        round_robin = self.system.inter_dimension_scheduling is InterDimensionScheduling.ROUND_ROBIN
        for c, chunk in enumerate(chunks):
            rotation = s.rr_rotation if round_robin else 0
            if round_robin and members is None:
                s.rr_rotation = (s.rr_rotation + 1) % max(1, len(self.dims(node.comm)))
            phases = self.phases(node.comm, chunk, node.involved_dims, rotation, members)
            queues, directions, trees = [], [], []
            for spec in phases:
                queue, anticlockwise = s.take_queue(spec.level, spec.pick)
                queues.append(queue)
                directions.append(anticlockwise and spec.impl.kind in _DIRECTED)
                tree = TreeType.ROOT_MAX
                if spec.impl.kind is ImplKind.DOUBLE_BINARY_TREE:
                    calls = s.dbt_calls.get((node.comm, spec.logical_dim), 0)
                    s.dbt_calls[(node.comm, spec.logical_dim)] = calls + 1
                    tree = TreeType.ROOT_MAX if calls % 2 == 0 else TreeType.ROOT_MIN
                trees.append(tree)
            self.proceed(s, Stream(coll, c, phases, tuple(queues), tuple(directions), tuple(trees), priority), t)

    # ---- queues -------------------------------------------------------------------------------------------
    def proceed(self, s: SysState, stream: Stream, t: int) -> None:
        """``proceed_to_next_vnet_baseline``: leave the current queue, enter the next phase's queue."""
        prev = stream.queue
        last = stream.next_phase == len(stream.phases)
        if last:
            coll = stream.coll
            coll.remaining -= 1
            if coll.remaining == 0:
                self.collective_done(t, s.rank, coll.node)
        if prev >= 0:
            s.queues[prev].remove(stream)
        if not last:
            stream.queue = stream.queues[stream.next_phase]
            stream.next_phase += 1
            stream.initialized = False
            _insert_stream(s.queues[stream.queue], stream)
        if prev >= 0:
            s.running[prev] -= 1
            self._start_streams(s, prev, t)
        if not last:
            self._start_streams(s, stream.queue, t)

    def _start_streams(self, s: SysState, q: int, t: int) -> None:
        streams = s.queues[q]
        while s.running[q] < len(streams) and s.running[q] < self.threshold:
            stream = streams[s.running[q]]
            s.running[q] += 1
            stream.initialized = True
            self._phase_started(s, stream, t)

    def _members(self, rank: int, stream: Stream, spec: PhaseSpec) -> tuple[tuple[int, ...], int | None]:
        if spec.logical_dim is None:
            return stream.coll.members, None
        network_dim = self.dims(stream.coll.comm)[spec.logical_dim].network_dim
        if network_dim is None:
            return tuple(range(self.network.npus_count)), None
        return self.network.dim_members(rank, network_dim), network_dim

    def _phase_started(self, s: SysState, stream: Stream, t: int) -> None:
        p = stream.next_phase - 1
        spec = stream.phases[p]
        where = None if spec.logical_dim is None else (s.rank, spec.logical_dim, stream.coll.comm, stream.reversed[p])
        placed = self._placed.get(where) if where is not None else None
        if placed is None:
            members, network_dim = self._members(s.rank, stream, spec)
            if stream.reversed[p]:
                members = members[::-1]
            index = self._index.get(members)
            if index is None:
                index = self._index[members] = {m: k for k, m in enumerate(members)}
            placed = members, network_dim, index
            if where is not None:
                self._placed[where] = placed
        members, network_dim, index = placed
        k = index[s.rank]
        if self.live is not None:
            self.live.start(s.rank, stream, (stream.coll.key, stream.chunk), spec, members, k, stream.trees[p], t)
            return
        if self.twins is not None:
            self._twin_phase_started(s.rank, stream, p, members, network_dim, t)
            return
        key = (stream.coll.key, stream.chunk, p, members[0])
        rv = self.rendezvous.get(key)
        if rv is None:
            rv = self.rendezvous[key] = _Rendezvous(members)
        rv.starts[k], rv.streams[k] = t, stream
        rv.order.append(k)
        if len(rv.order) < len(members):
            return
        del self.rendezvous[key]
        _check_sizes(stream, p, members, [st.phases[p].data_size_bytes for st in rv.streams])
        ends, order = self.timer.end_times(spec, members, tuple(rv.starts), tuple(rv.order), network_dim,
                                           stream.trees[p])
        for j in order:
            self.phase_done(ends[j], members[j], rv.streams[j])

    def _twin_phase_started(self, rank: int, stream: Stream, p: int, members: tuple[int, ...],
                            network_dim: int | None, t: int) -> None:
        twins, coll = self.twins, stream.coll
        own = (rank, coll.node, stream.chunk, p)
        self.twin_starts[own] = t
        self.twin_sizes[own] = stream.phases[p].data_size_bytes
        group, ordinal = coll.key
        keys = []
        for m in members:
            rep = twins.representatives[m]  # a twin in the same group runs the same node
            node = coll.node if rep == rank else twins.collective_node(m, group, ordinal, self.is_empty)
            keys.append((rep, node, stream.chunk, p))
        wait = _TwinWait(rank, stream, p, members, network_dim, keys)
        for key in set(keys):
            if key not in self.twin_starts:
                wait.missing += 1
                self.twin_waits.setdefault(key, []).append(wait)
        if not wait.missing:
            self._twin_phase_timed(wait)
        for other in self.twin_waits.pop(own, ()):
            other.missing -= 1
            if not other.missing:
                self._twin_phase_timed(other)

    def _twin_phase_timed(self, wait: _TwinWait) -> None:
        stream, p = wait.stream, wait.phase
        starts = tuple(self.twin_starts[key] for key in wait.keys)
        _check_sizes(stream, p, wait.members, [self.twin_sizes[key] for key in wait.keys])
        order = tuple(sorted(range(len(starts)), key=lambda j: (starts[j], j)))
        ends, _ = self.timer.end_times(stream.phases[p], wait.members, starts, order, wait.network_dim,
                                       stream.trees[p])
        self.phase_done(ends[self._index[wait.members][wait.rank]], wait.rank, stream)

    def waiting_description(self) -> str:
        if self.live is not None:
            return self.live.waiting_description()
        if self.twin_waits:
            (rank, node, chunk, phase), waits = next(iter(self.twin_waits.items()))
            return (f"rank {waits[0].rank} waits for rank {rank}'s node index {node} (chunk {chunk}, phase {phase}) "
                    "to start")
        if not self.rendezvous:
            return ""
        (group, ordinal, chunk, phase, _), rv = next(iter(self.rendezvous.items()))
        missing = [m for m, st in zip(rv.members, rv.starts) if st is None]
        return (f"collective #{ordinal} of group {group or 'world'} (chunk {chunk}, phase {phase}) waits for "
                f"ranks {missing[:8]}")


def _check_sizes(stream: Stream, phase: int, members: tuple[int, ...], sizes: list[int]) -> None:
    """Members of a phase that disagree on its size send messages their peers never match (ASTRA-sim's
    network matches a receive on source, tag and size): the binary stops with "has unreleased nodes" and
    prints no result, so genie refuses to give a time."""
    if min(sizes) == max(sizes):
        return
    group, ordinal = stream.coll.key
    shown = ", ".join(f"rank {m}: {b} B" for m, b in list(zip(members, sizes))[:8])
    raise GenieError(f"workload never finishes: {stream.coll.comm.value} #{ordinal} of group {group or 'world'} "
                     f"(chunk {stream.chunk}, phase {phase}): its members disagree on the size ({shown}); their "
                     "messages never match (ASTRA-sim would hang: 'has unreleased nodes', no result)")


def _insert_stream(queue: list[Stream], stream: Stream) -> None:
    """``Sys::insert_stream`` (FIFO intra-dimension policy): after running streams and higher priorities."""
    for pos, other in enumerate(queue):
        if not other.initialized and other.priority < stream.priority:
            queue.insert(pos, stream)
            return
    queue.append(stream)
