"""The built-in estimator's event loop: ASTRA-sim's workload layer over its system layer.

Per rank (``Workload``): whenever a node finishes, the dependency-free nodes are issued in node-id order, each
taking its hardware slot (one CPU op, one GPU kernel, one GPU communication in flight; receives take none).
Compute waits out its runtime; collectives go to :class:`~astra_adapter.streams.CollectiveScheduler`; sends
and receives match FIFO per (tag, src, dst, size) and complete at max(arrival, post); remote-memory accesses
take ``latency + size / bandwidth`` (queued per port for per-node memory and memory pools).

With ``representatives`` (see :mod:`astra_adapter.symmetry`) only one rank per class is simulated: phases take
their members' starts from the members' representatives and messages are matched between classes.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from genie.core.errors import GenieError

from astra_adapter.config import InterDimensionScheduling, IntraDimensionScheduling, MemoryType, \
    NetworkBackend, RemoteMemoryConfig, SystemConfig
from astra_adapter.links import LinkNetwork
from astra_adapter.live_phases import LivePhases
from astra_adapter.symmetry import mirrored_links
from astra_adapter.network import AnalyticalNetwork
from astra_adapter.phase_sim import PhaseEnv, PhaseTimer
from astra_adapter.streams import CollectiveScheduler, Stream, SysState, Twins
from astra_adapter.work import OpKind, RankWork, Slot, StatType

try:  # the compiled hot loop of the congestion-aware backend, built by the install step when it can be
    from astra_adapter.aware_core import AwareCore, Unsupported
except ImportError:  # not built: the pure Python reference runs everything
    AwareCore, Unsupported = None, None

_NODE_DONE, _PHASE_DONE, _ARRIVAL, _PORT_FREE, _CALL = 0, 1, 2, 3, 4
_BUSY_SLOTS = (Slot.CPU, Slot.GPU_COMP, Slot.GPU_COMM)


@dataclass(frozen=True)
class RankRun:
    """What one simulated rank did: finish tick, GPU compute ns, and per node (issue, end) ticks."""

    rank: int
    finish_ns: int
    gpu_compute_ns: int
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    issue_order: tuple[int, ...]  # node indices in the order they were issued


@dataclass(frozen=True)
class EngineRun:
    ranks: tuple[RankRun, ...]  # simulated ranks (representatives only when reduced by symmetry)
    log: tuple[tuple[int, str | int], ...]  # (tick, message or finished rank), in the order they happened
    simulated_phases: int
    approximated_phases: int  # staggered phases too large to follow member by member (started together)

    @property
    def finish_order(self) -> tuple[int, ...]:
        return tuple(item for _, item in self.log if isinstance(item, int))


class _Rank:
    __slots__ = ("rank", "work", "children", "instant", "pending", "heaps", "busy", "in_flight", "done", "starts",
                 "ends", "issued", "gpu_ns", "finish", "sys")

    def __init__(self, work: RankWork, instant: list[bool], sys: SysState) -> None:
        n = len(work.nodes)
        self.rank, self.work, self.instant, self.sys = work.rank, work, instant, sys
        self.children = work.children()
        self.pending = [len(w.deps) for w in work.nodes]
        self.heaps: list[list[int]] = [[], [], [], []]
        self.busy = [False, False, False]
        self.in_flight = self.done = self.gpu_ns = 0
        self.starts, self.ends = [-1] * n, [-1] * n
        self.issued: list[int] = []
        self.finish: int | None = None


class Engine:
    def __init__(self, work: tuple[RankWork, ...], groups: dict[str, tuple[int, ...]], system: SystemConfig,
                 network: AnalyticalNetwork, remote_memory: RemoteMemoryConfig | None = None,
                 queues_per_dim: int = 1, representatives: tuple[int, ...] | None = None,
                 backend: NetworkBackend = NetworkBackend.CONGESTION_UNAWARE, compiled: bool = False) -> None:
        if len(work) != network.npus_count:
            raise GenieError(f"the workload has {len(work)} ranks but the network has {network.npus_count} NPUs")
        _check_supported(system)
        self.network, self.remote = network, remote_memory or RemoteMemoryConfig()
        self.class_of = representatives or tuple(range(len(work)))
        env = PhaseEnv(network, system.endpoint_delay_ns, system.local_mem_bw_gb_per_s)
        self.timer = PhaseTimer(env)
        twins = Twins(representatives, work) if representatives is not None else None
        self.links: LinkNetwork | None = None
        self.core = None
        live = None
        if backend is NetworkBackend.CONGESTION_AWARE:
            self.links = LinkNetwork(network.config, self._call)
            mirror = representatives is not None
            if mirror and not mirrored_links(work, groups, network, self.links, system, representatives):
                raise GenieError("internal: these ranks cannot be mirrored in the congestion-aware network")
            if compiled and AwareCore is not None:
                # links, live phases and the event queue in one compiled loop (same events, same order)
                self.core = live = AwareCore(self.links, env, self._phase_ended, mirror)
                self.links = self.core
                self._at = self._core_at
            else:
                live = LivePhases(env, self.links, self._call, self._phase_ended, mirror)
            twins = None
        self.collectives = CollectiveScheduler(system, network, groups, self.timer, self._phase_done,
                                               self._collective_done, queues_per_dim, twins, live)
        simulated = sorted(set(self.class_of))
        self.ranks = {r: _Rank(work[r], self._instant_flags(work[r]), self.collectives.new_state(r))
                      for r in simulated}
        self.heap: list = []
        self.seq = 0
        self.arrived: dict[tuple, deque] = {}
        self.waiting: dict[tuple, deque] = {}
        self.ports: dict[int, deque] = {}
        self.log: list[tuple[int, str | int]] = []

    def _instant_flags(self, w: RankWork) -> list[bool]:
        """Nodes that finish the moment they are issued (skipped nodes, collectives without any phase)."""
        return [node.op is OpKind.SKIP or (node.op is OpKind.COLLECTIVE
                                           and self.collectives.is_empty(w.rank, node, w.groups[i]))
                for i, node in enumerate(w.nodes)]

    # ---- event loop -------------------------------------------------------------------------------------
    def _at(self, t: int, kind: int, rank: int, payload) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, rank, payload))

    def _core_at(self, t: int, kind: int, rank: int, payload) -> None:
        self.core.at(t, (kind, rank, payload))

    def _phase_done(self, t: int, rank: int, stream: Stream) -> None:
        self._at(t, _PHASE_DONE, rank, stream)

    def _phase_ended(self, t: int, rank: int, stream: Stream) -> None:
        """A live phase's member ended it now (``Algorithm::exit`` runs the system layer at once)."""
        self.collectives.proceed(self.ranks[rank].sys, stream, t)

    def _call(self, t: int, callback, argument) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, _CALL, 0, (callback, argument)))

    def _collective_done(self, t: int, rank: int, index: int) -> None:
        self._node_done(self.ranks[rank], index, t)

    def run(self) -> EngineRun:
        for r in self.ranks.values():
            for i, count in enumerate(r.pending):
                if count == 0:
                    heapq.heappush(r.heaps[r.work.nodes[i].slot], i)
            self._issue(r, 0)
            self._check_finish(r, 0)
        heap, ranks, collectives = self.heap, self.ranks, self.collectives
        if self.core is not None:
            self.core.run(self._dispatch)
        while heap:
            t, _, kind, rank, payload = heapq.heappop(heap)
            if kind == _CALL:
                payload[0](t, payload[1])
            else:
                self._dispatch(t, (kind, rank, payload))
        unfinished = [r for r in ranks.values() if r.finish is None]
        if unfinished:
            raise GenieError(self._deadlock_message(unfinished))
        runs = tuple(RankRun(r.rank, r.finish, r.gpu_ns, tuple(r.starts), tuple(r.ends), tuple(r.issued))
                     for r in ranks.values())
        log = sorted(self.log + collectives.log, key=lambda entry: entry[0])  # stable: same-tick order kept
        return EngineRun(runs, tuple(log), self.timer.simulated_phases, self.timer.barrier_approximations)

    def _dispatch(self, t: int, event: tuple) -> None:
        kind, rank, payload = event
        if kind == _PHASE_DONE:
            self.collectives.proceed(self.ranks[rank].sys, payload, t)
        elif kind == _NODE_DONE:
            self._node_done(self.ranks[rank], payload, t)
        elif kind == _CALL:
            payload[0](t, payload[1])
        elif kind == _ARRIVAL:
            self._arrival(payload, t)
        else:
            self._port_free(payload, t)

    # ---- workload layer -----------------------------------------------------------------------------------
    def _node_done(self, r: _Rank, i: int, t: int) -> None:
        nodes = r.work.nodes
        r.ends[i] = t
        r.done += 1
        r.in_flight -= 1
        slot = nodes[i].slot
        if slot is not Slot.FREE:
            r.busy[slot] = False
        pending, heaps = r.pending, r.heaps
        for c in r.children[i]:
            pending[c] -= 1
            if pending[c] == 0:
                heapq.heappush(heaps[nodes[c].slot], c)
        self._issue(r, t)
        self._check_finish(r, t)

    def _check_finish(self, r: _Rank, t: int) -> None:
        if r.finish is None and r.done == len(r.work.nodes):
            r.finish = t
            self.log.append((t, r.rank))

    def _issue(self, r: _Rank, t: int) -> None:
        """``issue_dep_free_nodes``: one pass over the dependency-free nodes in id order."""
        instant, heaps, busy = r.instant, r.heaps, r.busy
        while True:
            chosen: list[int] = []
            for slot in _BUSY_SLOTS:
                heap = heaps[slot]
                while heap and not busy[slot]:
                    i = heapq.heappop(heap)
                    chosen.append(i)
                    if not instant[i]:
                        busy[slot] = True
            if heaps[Slot.FREE]:
                chosen.extend(heaps[Slot.FREE])
                heaps[Slot.FREE] = []
            if not chosen:
                return
            if len(chosen) > 1:
                chosen.sort()
            deferred: list[int] = []
            for i in chosen:
                self._start(r, i, t, deferred)
            nodes = r.work.nodes
            for c in deferred:
                heapq.heappush(heaps[nodes[c].slot], c)
            # ASTRA-sim leaves nodes freed by skipped nodes for the next callback; with nothing in flight
            # there is none (it would stall), so issue them now.
            if r.in_flight or not deferred:
                return

    def _start(self, r: _Rank, i: int, t: int, deferred: list[int]) -> None:
        node = r.work.nodes[i]
        r.starts[i] = t
        r.issued.append(i)
        if r.instant[i]:
            r.ends[i] = t
            r.done += 1
            for c in r.children[i]:
                r.pending[c] -= 1
                if r.pending[c] == 0:
                    deferred.append(c)
            return
        r.in_flight += 1
        op = node.op
        if op is OpKind.COMPUTE or op is OpKind.BROADCAST:
            if node.gpu_compute:
                r.gpu_ns += node.runtime_ns
            self._at(t + node.runtime_ns, _NODE_DONE, r.rank, i)
        elif op is OpKind.COLLECTIVE:
            self.collectives.issue(r.sys, i, node, r.work.groups[i], t)
        elif op is OpKind.SEND:
            peer = r.work.peers[i]
            if peer == r.rank or not 0 <= peer < len(self.class_of):
                raise GenieError(f"rank {r.rank} node {node.node_id}: send to invalid peer {peer}")
            key = (node.tag, r.rank, self.class_of[peer], node.size_bytes)
            if self.links is not None:
                self.links.send(t, r.rank, peer, node.size_bytes, self._link_arrival, (key, i))
            else:
                self._at(t + self.network.delay_ns(r.rank, peer, node.size_bytes), _ARRIVAL, r.rank, (key, i))
        elif op is OpKind.RECV:
            peer = r.work.peers[i]
            if not 0 <= peer < len(self.class_of):
                raise GenieError(f"rank {r.rank} node {node.node_id}: receive from invalid peer {peer}")
            key = (node.tag, self.class_of[peer], r.rank, node.size_bytes)
            arrived = self.arrived.get(key)
            if arrived:
                arrived.popleft()
                self._at(t, _NODE_DONE, r.rank, i)
            else:
                self.waiting.setdefault(key, deque()).append((r.rank, i))
        else:
            self._remote_memory(r, i, t)

    def _link_arrival(self, t: int, payload) -> None:
        self._arrival(payload, t)

    def _arrival(self, payload, t: int) -> None:
        key, send_index = payload
        self._node_done(self.ranks[key[1]], send_index, t)
        waiting = self.waiting.get(key)
        if waiting:
            rank, i = waiting.popleft()
            self._node_done(self.ranks[rank], i, t)
        else:
            self.arrived.setdefault(key, deque()).append(t)

    def _remote_memory(self, r: _Rank, i: int, t: int) -> None:
        mem, node = self.remote, r.work.nodes[i]
        if mem.memory_type is MemoryType.NO_MEMORY_EXPANSION:
            raise GenieError(f"rank {r.rank} node {node.node_id}: remote memory access needs a memory-type other "
                             "than NO_MEMORY_EXPANSION (ASTRA-sim exits here)")
        runtime = int(mem.latency_ns + node.size_bytes / mem.bw_gb_per_s)
        if mem.memory_type is MemoryType.PER_NPU_MEMORY_EXPANSION:
            self._at(t + runtime, _NODE_DONE, r.rank, i)
            return
        port = r.rank // mem.npus_per_node if mem.memory_type is MemoryType.PER_NODE_MEMORY_EXPANSION else 0
        queue = self.ports.setdefault(port, deque())
        queue.append((r.rank, i, runtime))
        if len(queue) == 1:
            self._at(t + runtime, _PORT_FREE, r.rank, port)

    def _port_free(self, port: int, t: int) -> None:
        queue = self.ports[port]
        rank, i, _ = queue.popleft()
        if queue:
            self._at(t + queue[0][2], _PORT_FREE, queue[0][0], port)
        self._node_done(self.ranks[rank], i, t)

    def _deadlock_message(self, unfinished: list[_Rank]) -> str:
        shown = ", ".join(str(r.rank) for r in unfinished[:8]) + (" ..." if len(unfinished) > 8 else "")
        detail = self.collectives.waiting_description()
        if not detail and self.waiting:
            (tag, src, dst, size), _ = next(iter(self.waiting.items()))
            detail = f"rank {dst} waits for a {size}-byte message from rank {src} (tag {tag})"
        if not detail:
            detail = "nodes left that never become ready (a dependency cycle?)"
        return f"workload never finishes on ranks {shown}: {detail} (ASTRA-sim would hang)"


def _check_supported(system: SystemConfig) -> None:
    unsupported = []
    if system.model_shared_bus:
        unsupported.append("model-shared-bus (LogGP memory bus)")
    if system.boost_mode:
        unsupported.append("boost-mode")
    if system.replay_only:
        unsupported.append("replay-only")
    if system.intra_dimension_scheduling is not IntraDimensionScheduling.FIFO:
        unsupported.append(f"intra-dimension-scheduling {system.intra_dimension_scheduling.value}")
    if system.inter_dimension_scheduling not in (InterDimensionScheduling.ASCENDING,
                                                 InterDimensionScheduling.ROUND_ROBIN):
        unsupported.append(f"inter-dimension-scheduling {system.inter_dimension_scheduling.value}")
    if unsupported:
        raise GenieError("the built-in estimator does not model " + ", ".join(unsupported)
                         + " (run the ASTRA-sim binary instead)")


def stat_types(work: RankWork, run: RankRun) -> tuple[StatType, ...]:
    """Statistics buckets in ASTRA-sim's print order (most recently issued bucket first)."""
    seen: dict[StatType, None] = {}
    for i in reversed(run.issue_order):
        seen.setdefault(work.nodes[i].stat, None)
    return tuple(seen)


def run_engine(work: tuple[RankWork, ...], groups: dict[str, tuple[int, ...]], system: SystemConfig,
               network: AnalyticalNetwork, remote_memory: RemoteMemoryConfig | None = None, queues_per_dim: int = 1,
               representatives: tuple[int, ...] | None = None,
               backend: NetworkBackend = NetworkBackend.CONGESTION_UNAWARE, compiled: bool = True) -> EngineRun:
    """Run :class:`Engine`: the congestion-aware backend in the compiled loop when it is built and models the
    run (``compiled``), else on the pure Python reference. A run the compiled loop does not model, or that ends
    in an error, is run again on the reference, so that the result or the error is the reference's."""
    args = (work, groups, system, network, remote_memory, queues_per_dim, representatives, backend)
    if compiled and AwareCore is not None and backend is NetworkBackend.CONGESTION_AWARE:
        try:
            return Engine(*args, compiled=True).run()
        except (Unsupported, GenieError):
            pass
    return Engine(*args).run()
