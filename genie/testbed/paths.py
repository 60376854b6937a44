"""Which links a packet from one host to another crosses, and in which direction. Pure.

IP decides the route: the shortest path in L3 hops (hosts and routers; every pair of nodes on one segment is
one hop apart, bridges vanish). Each L3 hop is then expanded into the links it crosses: a point-to-point link,
or on a bridged segment the sender's link into its bridge, the links between bridges (a tree: no bridge loops
are allowed) and the link out to the receiver. Among equal-cost paths the first in topology order is taken
(routers hash flows over all of them; genie's fabrics give them equal shapes).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from genie.core.topology import LinkShape, SwitchKind
from genie.testbed.layout import EndLayout, Segment, SegmentKind, TestbedLayout


@dataclass(frozen=True)
class Hop:
    """Topology link ``link_index`` crossed from node ``src`` to node ``dst``."""

    link_index: int
    src: str
    dst: str

    def describe(self) -> str:
        return f"links[{self.link_index}] {self.src}>{self.dst}"


@dataclass(frozen=True)
class HostPath:
    src: str
    dst: str
    hops: tuple[Hop, ...]

    def describe(self) -> str:
        return "-".join([self.src] + [hop.dst for hop in self.hops]) if self.hops else self.src


class PathFinder:
    """Paths between hosts of one testbed layout. Breadth-first over nodes and segments, so a bridged segment
    of N members costs N, not N squared."""

    def __init__(self, layout: TestbedLayout) -> None:
        self.layout = layout
        topology = layout.topology
        self._bridges = {s.name for s in topology.switches if s.kind is SwitchKind.BRIDGE}
        self._segments = [s for s in layout.segments if s.kind is not SegmentKind.LOOPBACK]
        self._segments_of: dict[str, list[int]] = {}
        for index, segment in enumerate(self._segments):
            for member in segment.members:
                self._segments_of.setdefault(member.node, []).append(index)
        self._bridge_links: dict[str, list[tuple[str, int]]] = {b: [] for b in self._bridges}
        for index, link in enumerate(topology.links):
            if link.a in self._bridges and link.b in self._bridges:
                self._bridge_links[link.a].append((link.b, index))
                self._bridge_links[link.b].append((link.a, index))
        self._end_of: dict[tuple[str, str], EndLayout] = {(e.node, e.ifname): e for e in layout.ends}
        self._bridge_paths: dict[str, dict[str, tuple[str, int] | None]] = {}

    def is_bridge(self, node: str) -> bool:
        return node in self._bridges

    def end(self, node: str, ifname: str) -> EndLayout:
        return self._end_of[(node, ifname)]

    def _l3_tree(self, src: str) -> dict[str, tuple[str, Segment] | None]:
        """Breadth-first predecessors (node -> (previous node, segment)) of every L3 node reachable from src."""
        previous: dict[str, tuple[str, Segment] | None] = {src: None}
        expanded: set[int] = set()
        frontier = deque([src])
        while frontier:
            node = frontier.popleft()
            for index in self._segments_of.get(node, ()):
                if index in expanded:
                    continue
                expanded.add(index)
                segment = self._segments[index]
                for member in segment.members:
                    if member.node not in previous:
                        previous[member.node] = (node, segment)
                        frontier.append(member.node)
        return previous

    @staticmethod
    def _route(previous: dict[str, tuple[str, Segment] | None], src: str,
               dst: str) -> list[tuple[str, str, Segment]]:
        if dst not in previous:
            raise KeyError(f"{dst} cannot be reached from {src}")
        hops: list[tuple[str, str, Segment]] = []
        node = dst
        while (step := previous[node]) is not None:
            hops.append((step[0], node, step[1]))
            node = step[0]
        return hops[::-1]

    def l3_route(self, src: str, dst: str) -> list[tuple[str, str, Segment]]:
        """The L3 hops (from, to, segment) of a shortest path from `src` to `dst` ([] when src == dst)."""
        return self._route(self._l3_tree(src), src, dst)

    def segment_hops(self, segment: Segment, src: str, dst: str) -> list[Hop]:
        """The links crossed from `src` to `dst`, both attached to `segment`."""
        a, b = segment.member(src), segment.member(dst)
        assert a is not None and b is not None
        if segment.kind is SegmentKind.POINT_TO_POINT:
            return [Hop(self.end(src, a.ifname).link_index, src, dst)]
        end_in, end_out = self.end(src, a.ifname), self.end(dst, b.ifname)
        return ([Hop(end_in.link_index, src, end_in.peer)] + self.bridge_hops(end_in.peer, end_out.peer)
                + [Hop(end_out.link_index, end_out.peer, dst)])

    def bridge_hops(self, start: str, goal: str) -> list[Hop]:
        """Links between bridges from `start` to `goal` (bridges form a tree, so the path is unique)."""
        if start not in self._bridge_paths:
            previous: dict[str, tuple[str, int] | None] = {start: None}
            frontier = deque([start])
            while frontier:
                node = frontier.popleft()
                for peer, index in self._bridge_links[node]:
                    if peer not in previous:
                        previous[peer] = (node, index)
                        frontier.append(peer)
            self._bridge_paths[start] = previous
        previous = self._bridge_paths[start]
        hops: list[Hop] = []
        node = goal
        while (step := previous[node]) is not None:
            hops.append(Hop(step[1], step[0], node))
            node = step[0]
        return hops[::-1]

    def _expand(self, route: list[tuple[str, str, Segment]]) -> tuple[Hop, ...]:
        hops: list[Hop] = []
        for a, b, segment in route:
            hops += self.segment_hops(segment, a, b)
        return tuple(hops)

    def path(self, src: str, dst: str) -> HostPath:
        return HostPath(src, dst, self._expand(self.l3_route(src, dst)))

    def paths_from(self, src: str, destinations: list[str]) -> list[HostPath]:
        """Paths from `src` to each of `destinations` (one breadth-first search)."""
        previous = self._l3_tree(src)
        return [HostPath(src, dst, self._expand(self._route(previous, src, dst))) for dst in destinations]


def path_shapes(layout: TestbedLayout, path: HostPath) -> list[LinkShape]:
    return [layout.topology.links[hop.link_index].shape for hop in path.hops]


def one_way_delay_us(layout: TestbedLayout, path: HostPath) -> float:
    return sum(shape.delay_us for shape in path_shapes(layout, path))


def path_loss_pct(layout: TestbedLayout, path: HostPath) -> float:
    survive = 1.0
    for shape in path_shapes(layout, path):
        survive *= 1 - shape.loss_pct / 100
    return round(100 * (1 - survive), 9)


def path_rate_bps(layout: TestbedLayout, path: HostPath) -> int | None:
    rates = [shape.rate_bps for shape in path_shapes(layout, path) if shape.rate_bps is not None]
    return min(rates) if rates else None
