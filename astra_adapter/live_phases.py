"""Collective phases run live, every member in the run's one event loop (the congestion-aware backend).

In the congestion-unaware backend a phase never meets another one, so :class:`~astra_adapter.phase_sim.
PhaseTimer` times each on its own. With links as shared resources (:mod:`astra_adapter.links`) a chunk of one
phase may queue behind a chunk of another (the next chunk of the same collective, another process group), so
here each member runs the same algorithm objects (:class:`~astra_adapter.phase_sim.RingFamily`,
:class:`~astra_adapter.dbt.DbtMember`) the moment its stream starts the phase, and its messages cross the
link network:

- a packet bundle crosses the memory bus (``endpoint-delay``, 10 ns on a communicator group's ring) and, when
  it needs a reduction, then waits the local-memory time (two events, as ``PacketBundle`` registers them);
- a send injects a chunk into the link network; its arrival completes the matching posted receive (FIFO per
  stream, source, destination and size), or is kept until the receive is posted (then it completes at once);
- a member that ends its phase hands the stream back to the system layer (``Algorithm::exit``) at that tick.

With ``mirror`` only one rank runs (every rank is its twin, :func:`~astra_adapter.symmetry.mirrored_links`):
its chunk to rank r+k crosses the links of its own route, which carry nothing else, and when it arrives the
message from r-k arrives at the representative (the same chunk seen rotated by k).
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from astra_adapter.collective_plan import PhaseSpec
from astra_adapter.config import ImplKind
from astra_adapter.dbt import DbtMember, TreeType, binary_tree
from astra_adapter.links import LinkNetwork, Schedule
from astra_adapter.phase_sim import PhaseEnv, RingFamily

PhaseEnded = Callable[[int, int, object], None]  # (tick, rank, stream)


class _Context:
    __slots__ = ("rank", "stream", "key", "bus_ns")

    def __init__(self, rank: int, stream, key: tuple, bus_ns: int) -> None:
        self.rank, self.stream, self.key, self.bus_ns = rank, stream, key, bus_ns


class LivePhases:
    def __init__(self, env: PhaseEnv, links: LinkNetwork, schedule: Schedule, phase_ended: PhaseEnded,
                 mirror: bool = False) -> None:
        self.env, self.links, self.schedule, self.phase_ended = env, links, schedule, phase_ended
        self.mirror = mirror
        self.context: dict[object, _Context] = {}
        self.arrived: dict[tuple, deque] = {}
        self.waiting: dict[tuple, deque] = {}
        self._reduction: dict[int, int] = {}
        self._shapes: dict[tuple, object] = {}
        self.started_phases = 0

    def start(self, rank: int, stream, stream_key: tuple, spec: PhaseSpec, members: tuple[int, ...], index: int,
              tree: TreeType, t: int) -> None:
        """Member ``index`` (rank ``rank``) starts ``spec`` at ``t`` (``StreamBaseline::init``)."""
        self.started_phases += 1
        if spec.impl.kind is ImplKind.DOUBLE_BINARY_TREE:
            shape = self._shapes.get((len(members), tree))
            if shape is None:
                shape = self._shapes[(len(members), tree)] = binary_tree(len(members), tree)
            member = DbtMember(members, index, shape, spec.data_size_bytes, index)
        else:
            member = RingFamily(spec, members, index, index)
        self.context[member] = _Context(rank, stream, stream_key, self.env.bus_delay_ns(spec.local))
        member.start(self, t)

    # ---- the interface the algorithms call ------------------------------------------------------------------
    def bundle(self, member, t: int, size: int, processed: bool) -> None:
        ctx = self.context[member]
        self.schedule(t + ctx.bus_ns, self._bus_crossed, (member, size if processed else -1))

    def _bus_crossed(self, t: int, arg) -> None:
        member, size = arg
        if size < 0:
            member.on_general(self, t)
            return
        red = self._reduction.get(size)
        if red is None:
            red = self._reduction[size] = self.env.reduction_ns(size)
        self.schedule(t + red, self._reduced, member)

    def _reduced(self, t: int, member) -> None:
        member.on_general(self, t)

    def send(self, member, t: int, dst: int, size: int) -> None:
        src = member.rank
        if self.mirror:
            members, k = member.members, member.index
            mirrored = members[(2 * k - members.index(dst)) % len(members)]
            self.links.send(t, src, dst, size, self._arrival, (self.context[member].key, mirrored, src, size))
            return
        self.links.send(t, src, dst, size, self._arrival, (self.context[member].key, src, dst, size))

    def _arrival(self, t: int, key: tuple) -> None:
        waiting = self.waiting.get(key)
        if waiting:
            member = waiting.popleft()
            if not waiting:
                del self.waiting[key]
            member.on_received(self, t)
        else:
            self.arrived.setdefault(key, deque()).append(t)

    def post_recv(self, t: int, member, src: int, size: int) -> None:
        key = (self.context[member].key, src, member.rank, size)
        arrived = self.arrived.get(key)
        if arrived:
            arrived.popleft()
            if not arrived:
                del self.arrived[key]
            self.schedule(t, self._received, member)
        else:
            self.waiting.setdefault(key, deque()).append(member)

    def _received(self, t: int, member) -> None:
        member.on_received(self, t)

    def finish(self, member, t: int) -> None:
        if member.done:
            return
        member.done = True
        ctx = self.context.pop(member)
        self.phase_ended(t, ctx.rank, ctx.stream)

    def waiting_description(self) -> str:
        if not self.waiting:
            return ""
        (_, src, dst, size), _ = next(iter(self.waiting.items()))
        return f"rank {dst} waits for a {size}-byte collective message from rank {src}"
