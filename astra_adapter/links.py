"""astra-network-analytical's congestion-aware network: links as resources, chunks queued per link.

Only one-dimensional topologies exist in that backend (any other is refused, as ASTRA-sim exits there):

- ``Ring``: NPU *i* has a link to *i+1* and one back (bidirectional); a chunk goes the shorter way round,
  clockwise when both ways are equally long;
- ``FullyConnected``: one link per ordered NPU pair;
- ``Switch``: one link up from every NPU to the switch (device ``npus_count``) and one down, so a chunk
  crosses two links and is stored and forwarded at the switch.

A link is busy while it serialises a chunk (``size / bandwidth``, truncated to whole ns; 0 for a 0-byte chunk);
the chunk arrives at
the link's far end ``latency + size / bandwidth`` after its transmission started (the sum truncated). A chunk
meeting a busy link waits in that link's FIFO queue; when the link frees, the first waiting chunk starts.
Events go through the caller's ``schedule(tick, callback, argument)`` so that they interleave, FIFO per tick,
with every other event of the run.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from genie.core.errors import GenieError

from astra_adapter.config import NetworkConfig, TopologyKind

Schedule = Callable[[int, Callable, object], None]  # (tick, callback(tick, argument), argument)


class _Link:
    __slots__ = ("busy", "pending", "far_end")

    def __init__(self, far_end: int) -> None:
        self.busy = False
        self.pending: deque = deque()
        self.far_end = far_end


class _Chunk:
    __slots__ = ("size_bytes", "route", "hop", "on_arrival", "argument")

    def __init__(self, size_bytes: int, route: tuple[int, ...], on_arrival: Callable, argument) -> None:
        self.size_bytes, self.route, self.hop = size_bytes, route, 0
        self.on_arrival, self.argument = on_arrival, argument


class LinkNetwork:
    """The devices, links and routes of one congestion-aware topology."""

    def __init__(self, config: NetworkConfig, schedule: Schedule) -> None:
        if len(config.dims) != 1:
            raise GenieError("the congestion-aware backend only supports 1-dim topologies (network.yml has "
                             f"{len(config.dims)} dimensions; ASTRA-sim exits here)")
        dim = config.dims[0]
        self.kind, self.npus_count = dim.topology, dim.npus_count
        self.latency_ns, self.bw_bytes_per_ns = dim.latency_ns, dim.bw_bytes_per_ns
        self.schedule = schedule
        n = self.npus_count
        self.links: dict[tuple[int, int], _Link] = {}
        if self.kind is TopologyKind.RING:
            pairs = [(i, (i + 1) % n) for i in range(n)]
            pairs += [(b, a) for a, b in pairs]
        elif self.kind is TopologyKind.SWITCH:
            pairs = [(i, n) for i in range(n)] + [(n, i) for i in range(n)]
        else:
            pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
        for a, b in pairs:
            self.links.setdefault((a, b), _Link(b))
        self._routes: dict[tuple[int, int], tuple[_Link, ...]] = {}
        self._delays: dict[int, tuple[int, int]] = {}

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """The devices a chunk from ``src`` to ``dst`` visits, both ends included."""
        n = self.npus_count
        if self.kind is TopologyKind.SWITCH:
            return (src, n, dst)
        if self.kind is TopologyKind.FULLY_CONNECTED:
            return (src, dst)
        clockwise = (dst - src) % n
        step = -1 if n - clockwise < clockwise else 1
        path, current = [src], src
        while current != dst:
            current = (current + step) % n
            path.append(current)
        return tuple(path)

    def _links(self, src: int, dst: int) -> tuple[_Link, ...]:
        links = self._routes.get((src, dst))
        if links is None:
            path = self.route(src, dst)
            links = self._routes[(src, dst)] = tuple(self.links[(a, b)] for a, b in zip(path, path[1:]))
        return links

    def _delay(self, size_bytes: int) -> tuple[int, int]:
        """(serialisation ns, arrival ns) of a chunk on one link."""
        delays = self._delays.get(size_bytes)
        if delays is None:
            ser = size_bytes / self.bw_bytes_per_ns
            delays = self._delays[size_bytes] = (int(ser), int(self.latency_ns + ser))
        return delays

    def send(self, t: int, src: int, dst: int, size_bytes: int, on_arrival: Callable, argument) -> None:
        """Inject a chunk at ``t``; ``on_arrival(tick, argument)`` runs when it reaches ``dst``. A 0-byte chunk
        (a collective smaller than its splits times its members) is sent like any other - no serialisation, the
        link's latency: ASTRA-sim's ``assert(chunk_size > 0)`` is compiled out of its Release build."""
        chunk = _Chunk(size_bytes, self._links(src, dst), on_arrival, argument)
        self._enter(t, chunk)

    def _enter(self, t: int, chunk: _Chunk) -> None:
        link = chunk.route[chunk.hop]
        if link.busy:
            link.pending.append(chunk)
        else:
            self._transmit(t, link, chunk)

    def _transmit(self, t: int, link: _Link, chunk: _Chunk) -> None:
        link.busy = True
        ser, arrival = self._delay(chunk.size_bytes)
        self.schedule(t + arrival, self._arrived, chunk)
        self.schedule(t + ser, self._freed, link)

    def _arrived(self, t: int, chunk: _Chunk) -> None:
        chunk.hop += 1
        if chunk.hop == len(chunk.route):
            chunk.on_arrival(t, chunk.argument)
        else:
            self._enter(t, chunk)

    def _freed(self, t: int, link: _Link) -> None:
        link.busy = False
        if link.pending:
            self._transmit(t, link, link.pending.popleft())
