"""Timing of one collective phase of one chunk: ASTRA-sim's collective algorithms, packet by packet.

A phase runs on a group of ranks (a ring along one network dimension, or a communicator group). Each member
starts it when its stream reaches the front of its queue; :meth:`PhaseTimer.end_times` returns when each
member's phase ends. Phases never interact with each other in the congestion-unaware backend (no link sharing, fixed
memory-bus delays, FIFO message matching per (src, dst, size)), so a phase is simulated on its own.

Mechanics mirrored from ASTRA-sim (``Ring``, ``AllToAll`` = "direct", ``HalvingDoubling``,
``DoubleBinaryTreeAllReduce``, ``PacketBundle``, ``MemBus``):

- every packet a member inserts becomes a *bundle* that crosses the NPU<->memory bus: ``endpoint-delay`` ns
  (10 ns on a communicator group's "Local" ring), plus ``3 * floor(bytes / local-mem-bw)`` ns when the packet
  needs a reduction (reduce-scatter steps; all-reduce steps in its first half);
- a bundle's return frees one send slot; a member sends while it has packets, slots and sends left;
- a message costs the network's delay; a receive completes at max(arrival, time the receive was posted).

When every member starts together and the group is uniform (all members see the same delays), one member's
timeline is every member's: it is simulated alone with its peers' messages mirrored ("mirror" mode).
Results are cached by everything they depend on.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from genie.core.errors import GenieError

from astra_adapter.collective_plan import DIRECT_LIKE, HD_LIKE, CommKind, PhaseSpec
from astra_adapter.config import ImplKind
from astra_adapter.dbt import DbtMember, TreeType, binary_tree
from astra_adapter.network import AnalyticalNetwork

LOCAL_BUS_DELAY_NS = 10  # MemBus "Fast" transmission (RingTopology::Dimension::Local)


@dataclass(frozen=True)
class PhaseEnv:
    network: AnalyticalNetwork
    endpoint_delay_ns: int
    local_mem_bw_gb_per_s: float | None

    def bus_delay_ns(self, local: bool) -> int:
        return LOCAL_BUS_DELAY_NS if local else self.endpoint_delay_ns

    def reduction_ns(self, size_bytes: int) -> int:
        """One write and two reads of local memory (``PacketBundle``), each truncated to whole ns."""
        if self.local_mem_bw_gb_per_s is None:
            return 30  # ASTRA-sim without a memory model: 10 ns per access
        return 3 * int(size_bytes / self.local_mem_bw_gb_per_s)


class RingFamily:
    """One member of ``Ring``, ``AllToAll`` (direct) or ``HalvingDoubling``."""

    __slots__ = ("kind", "comm", "members", "index", "rank", "n", "parallel", "stream_count", "sends", "msg_size",
                 "receiver", "sender", "non_zero_total", "middle", "zero", "non_zero", "toggle", "free",
                 "packets", "received", "rank_offset", "multiplier", "done", "slot")

    def __init__(self, spec: PhaseSpec, members: tuple[int, ...], index: int, slot: int) -> None:
        n = len(members)
        comm, data = spec.comm, spec.data_size_bytes
        self.kind, self.comm, self.members, self.index, self.n = spec.impl.kind, comm, members, index, n
        self.rank, self.slot, self.done = members[index], slot, False
        self.parallel = 1
        self.stream_count = 2 * (n - 1) if comm is CommKind.ALL_REDUCE else (
            (n - 1) * n // 2 if comm is CommKind.ALL_TO_ALL else n - 1)
        self.msg_size = data if comm is CommKind.ALL_GATHER else data // n
        self.receiver, self.sender = members[(index + 1) % n], members[(index - 1) % n]
        self.non_zero_total = n - 1
        self.middle = n - 1
        if self.kind in DIRECT_LIKE:
            window = spec.impl.window
            self.parallel = n - 1 if window == -1 else min(window, n - 1)
            if comm is CommKind.ALL_TO_ALL:
                self.stream_count = n - 1
            self.non_zero_total = (n - 1) * self.parallel if spec.local else self.parallel
        elif self.kind in HD_LIKE:
            steps = n.bit_length() - 1
            self.stream_count = 2 * steps if comm is CommKind.ALL_REDUCE else steps
            self.non_zero_total = steps - 1
            if comm is CommKind.ALL_GATHER:
                self.msg_size, self.rank_offset, self.multiplier = data, n // 2, 0.5
            else:
                self.msg_size, self.rank_offset, self.multiplier = data // 2, 1, 2.0
            self._hd_peer()
        self.sends = self.stream_count
        self.zero = self.non_zero = 0
        self.toggle = False
        self.free = 0
        self.packets: deque = deque()
        self.received = 0

    def _hd_peer(self) -> None:
        offset = self.rank_offset
        clockwise = offset == 0 or (self.index // offset) % 2 == 0
        step = offset if clockwise else -offset
        self.receiver = self.sender = self.members[(self.index + step) % self.n]

    def _advance(self) -> None:
        """``process_max_count`` after a packet's release: next peer (direct, HD) and size (HD)."""
        if self.kind in DIRECT_LIKE:
            n, members = self.n, self.members
            r = (members.index(self.receiver) + 1) % n
            if r == self.index:
                r = (r + 1) % n
            s = (members.index(self.sender) - 1) % n
            if s == self.index:
                s = (s - 1) % n
            self.receiver, self.sender = members[r], members[s]
        elif self.kind in HD_LIKE:
            self.rank_offset = int(self.rank_offset * self.multiplier)
            self.msg_size = int(self.msg_size / self.multiplier)
            if self.rank_offset == self.n and self.comm is CommKind.ALL_REDUCE:
                self.multiplier = 0.5
                self.rank_offset = int(self.rank_offset * 0.5)
                self.msg_size = int(self.msg_size / 0.5)
            self._hd_peer()

    def insert(self, sim: "_PhaseSim", t: int) -> None:
        if self.zero == 0 and self.non_zero == 0:
            self.zero, self.non_zero, self.toggle = self.parallel, self.non_zero_total, not self.toggle
        if self.zero > 0:
            processed = False
            self.zero -= 1
        elif self.non_zero > 0:
            processed = self.comm is CommKind.REDUCE_SCATTER or (self.comm is CommKind.ALL_REDUCE and self.toggle)
            self.non_zero -= 1
        else:
            raise GenieError("collective phase injected a packet it does not have (ASTRA-sim panics here)")
        self.packets.append((self.receiver, self.sender, self.msg_size))
        sim.bundle(self, t, self.msg_size, processed)
        self._advance()

    def start(self, sim: "_PhaseSim", t: int) -> None:
        for _ in range(self.parallel):
            self.insert(sim, t)

    def on_received(self, sim: "_PhaseSim", t: int) -> None:
        self.received += 1
        self.insert(sim, t)

    def on_general(self, sim: "_PhaseSim", t: int) -> None:
        self.free += 1
        if self.kind in DIRECT_LIKE and self.comm is CommKind.ALL_REDUCE and self.stream_count <= self.middle:
            if self.received < self.middle:
                return
            for _ in range(self.parallel):
                self._ready(sim, t)
        else:
            self._ready(sim, t)
        if self.stream_count == 0 and self.free == self.parallel:
            sim.finish(self, t)

    def _ready(self, sim: "_PhaseSim", t: int) -> None:
        if not self.packets or self.stream_count == 0 or self.free == 0:
            return
        dest, src, size = self.packets.popleft()
        sim.send(self, t, dest, size)
        sim.post_recv(t, self, src, size)
        self.stream_count -= 1
        self.free -= 1


class _PhaseSim:
    """A small event loop for one phase; ``mirror``: one member stands for all (peers' sends mirrored)."""

    def __init__(self, env: PhaseEnv, spec: PhaseSpec, mirror: bool) -> None:
        self.env, self.mirror = env, mirror
        self.bus_ns = env.bus_delay_ns(spec.local)
        self.heap: list = []
        self.seq = 0
        self.arrived: dict[tuple, deque] = {}   # (src, dst, size) -> arrivals not yet received
        self.waiting: dict[tuple, deque] = {}   # (src, dst, size) -> members waiting for a message
        self.ends: dict[int, int] = {}
        self._reduction: dict[int, int] = {}

    def at(self, t: int, action: str, member, arg=None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, action, member, arg))

    def bundle(self, member, t: int, size: int, processed: bool) -> None:
        delay = self.bus_ns
        if processed:
            red = self._reduction.get(size)
            if red is None:
                red = self._reduction[size] = self.env.reduction_ns(size)
            delay += red
        self.at(t + delay, "general", member)

    def send(self, member, t: int, dst: int, size: int) -> None:
        if not self.mirror:
            src = member.rank
            self.at(t + self.env.network.delay_ns(src, dst, size), "arrival", None, (src, dst, size))

    def post_recv(self, t: int, member, src: int, size: int) -> None:
        key = (src, member.rank, size)
        if self.mirror:  # the peer sent its mirror image of our message at this same tick
            self.at(t + self.env.network.delay_ns(src, member.rank, size), "arrival", None, key)
        arrived = self.arrived.get(key)
        if arrived:
            arrived.popleft()
            self.at(t, "received", member)
        else:
            self.waiting.setdefault(key, deque()).append(member)

    def finish(self, member, t: int) -> None:
        if not member.done:
            member.done = True
            self.ends[member.slot] = t

    def run(self, members: list, starts: list[int]) -> dict[int, int]:
        for member, t in zip(members, starts):
            self.at(t, "start", member)
        heap = self.heap
        while heap:
            t, _, action, member, arg = heapq.heappop(heap)
            if action == "general":
                member.on_general(self, t)
            elif action == "arrival":
                waiting = self.waiting.get(arg)
                if waiting:
                    waiting.popleft().on_received(self, t)
                else:
                    self.arrived.setdefault(arg, deque()).append(t)
            elif action == "received":
                member.on_received(self, t)
            else:
                member.start(self, t)
        return self.ends


def _uniform_ring(network: AnalyticalNetwork, members: tuple[int, ...]) -> bool:
    """Every member receives from its predecessor over the same (dimension, hops)."""
    first = network.hops(members[-1], members[0])
    return all(network.hops(members[i - 1], members[i]) == first for i in range(1, len(members)))


class PhaseTimer:
    """Per-member end times of phases, with a cache (one timer per estimate run).

    :meth:`end_times` also returns the order in which members finish, which is the order ASTRA-sim processes
    same-tick events in (FIFO by causality). Small groups are simulated member by member for it; a uniform ring
    started together needs no simulation for it: its finish order is its start order moved ``sends`` places
    along the ring.
    """

    FULL_SIMULATION_MAX_NPUS = 64
    FULL_SIMULATION_MAX_SENDS = 250_000  # members x sends; above it a late start becomes a barrier (see below)

    def __init__(self, env: PhaseEnv) -> None:
        self.env = env
        self._cache: dict[tuple, tuple[tuple[int, ...], tuple[int, ...] | int]] = {}
        self._uniform: dict[tuple[int, ...], bool] = {}
        self.simulated_phases = 0
        self.barrier_approximations = 0

    def _is_uniform(self, members: tuple[int, ...]) -> bool:
        uniform = self._uniform.get(members)
        if uniform is None:
            uniform = self._uniform[members] = _uniform_ring(self.env.network, members)
        return uniform

    def end_times(self, spec: PhaseSpec, members: tuple[int, ...], starts: tuple[int, ...],
                  start_order: tuple[int, ...], network_dim: int | None,
                  tree: TreeType = TreeType.ROOT_MAX) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(end tick per member, member indices in finishing order); ``start_order``: indices as they started."""
        t0 = min(starts)
        rel = tuple(s - t0 for s in starts)
        kind = spec.impl.kind
        ring = kind in (ImplKind.RING, ImplKind.ONE_RING)
        if any(rel) and kind is not ImplKind.DOUBLE_BINARY_TREE and \
                len(members) * RingFamily(spec, members, 0, 0).sends > self.FULL_SIMULATION_MAX_SENDS:
            # Too big to follow every member: start everyone with the last one (an upper bound on every end).
            self.barrier_approximations += 1
            t0, rel = max(starts), (0,) * len(starts)
        where: tuple = ("dim", network_dim) if network_dim is not None else ("members", members)
        mirror = kind is not ImplKind.DOUBLE_BINARY_TREE and not any(rel)
        if mirror and network_dim is None:
            mirror = ring and self._is_uniform(members)
            if mirror:
                where = ("uniform-ring", self.env.network.hops(members[-1], members[0]), len(members))
        if mirror and not ring and len(members) <= self.FULL_SIMULATION_MAX_NPUS:
            mirror = False  # direct / halving-doubling: simulate everyone for ASTRA's finishing order
        key = (spec.comm, spec.impl, spec.data_size_bytes, spec.local, where,
               tree if kind is ImplKind.DOUBLE_BINARY_TREE else None,
               None if mirror else rel, None if mirror else start_order)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._simulate(spec, members, rel, start_order, mirror, tree)
        rel_ends, order = cached
        if isinstance(order, int):  # mirrored: each ring send moves the FIFO order one place along the ring
            order = tuple((k + order) % len(members) for k in start_order)
        return tuple(t0 + d for d in rel_ends), order

    def _simulate(self, spec: PhaseSpec, members: tuple[int, ...], rel: tuple[int, ...],
                  start_order: tuple[int, ...], mirror: bool,
                  tree: TreeType) -> tuple[tuple[int, ...], tuple[int, ...] | int]:
        """End ticks relative to the first start, and the finishing order (an int: a shift of the start order)."""
        self.simulated_phases += 1
        n = len(members)
        sim = _PhaseSim(self.env, spec, mirror=mirror)
        if mirror:
            algos = [RingFamily(spec, members, 0, 0)]
        elif spec.impl.kind is ImplKind.DOUBLE_BINARY_TREE:
            shape = binary_tree(n, tree)
            algos = [DbtMember(members, k, shape, spec.data_size_bytes, k) for k in start_order]
        else:
            algos = [RingFamily(spec, members, k, k) for k in start_order]
        ends = sim.run(algos, [rel[a.slot] for a in algos])
        if len(ends) != len(algos):
            stuck = [members[a.slot] for a in algos if a.slot not in ends]
            raise GenieError(f"{spec.comm.value} phase ({spec.impl.spelled}) never finished on ranks "
                             f"{stuck[:8]} (ASTRA-sim would hang)")
        if mirror:
            ring = spec.impl.kind in (ImplKind.RING, ImplKind.ONE_RING)
            return (ends[0],) * n, algos[0].sends if ring else 0
        return tuple(ends[k] for k in range(n)), tuple(ends)
