"""The node path each data connection of a session took on a testbed (:mod:`genie.core.flowpath`).

From the sender's host, hop by hop towards the receiver's: every node that routes (a host, a router) is asked
which interface it sends exactly this connection's 5-tuple out of (``ip route get ... iif IIF ipproto tcp
sport S dport D``: the kernel's own ECMP choice); a bridge forwards along the topology's one way to the
receiver. The lookup is an interface (:class:`NextHopLookup`): :class:`genie.testbed.netlink.FlowRoutes` asks
the kernel, tests pass a fake.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from genie.core.flowpath import FlowPath, FlowTuple, SessionPaths
from genie.core.testbed import TestbedInfo
from genie.core.topology import SwitchKind
from genie.topology.graph import adjacency, hop_distances


class NextHopLookup(Protocol):
    def output_interface(self, netns_name: str, flow: FlowTuple, iif: str | None = None) -> str | None:
        """The interface `flow` leaves `netns_name` by, arriving on `iif` (None: sent from there)."""


class _Walker:
    def __init__(self, info: TestbedInfo, lookup: NextHopLookup) -> None:
        topology = info.topology
        self.lookup = lookup
        self.neighbours = adjacency(topology)
        self.host_of_address = {h.address: h.host for h in info.hosts}
        self.netns = {h.host: h.netns for h in info.hosts}
        self.peer_by_interface: dict[tuple[str, str], str] = {}
        self.interface_to: dict[tuple[str, str], str] = {}
        for end in info.link_ends:
            self.peer_by_interface[(end.node, end.ifname)] = end.peer
            self.interface_to.setdefault((end.node, end.peer), end.ifname)
            if end.netns is not None:
                self.netns.setdefault(end.node, end.netns)
        self.bridges = {s.name for s in topology.switches if s.kind is SwitchKind.BRIDGE}
        self._distances: dict[str, dict[str, int]] = {}

    def path(self, flow: FlowTuple) -> tuple[str, ...] | None:
        src, dst = self.host_of_address.get(flow.src_ip), self.host_of_address.get(flow.dst_ip)
        if src is None or dst is None or src == dst:
            return None
        nodes, node, iif = [src], src, None
        for _ in range(len(self.neighbours)):
            if node == dst:
                return tuple(nodes)
            nxt = self._bridge_hop(node, dst) if node in self.bridges else self._routed_hop(node, flow, iif)
            if nxt is None or nxt in nodes:
                return None
            iif = self.interface_to.get((nxt, node))
            nodes.append(nxt)
            node = nxt
        return None

    def _routed_hop(self, node: str, flow: FlowTuple, iif: str | None) -> str | None:
        netns = self.netns.get(node)
        if netns is None:
            return None
        oif = self.lookup.output_interface(netns, flow, iif)
        return None if oif is None else self.peer_by_interface.get((node, oif))

    def _bridge_hop(self, node: str, dst: str) -> str | None:
        distance = self._distances.get(dst)
        if distance is None:
            distance = self._distances[dst] = hop_distances(self.neighbours, dst)
        if node not in distance:
            return None
        hops = [p for p in self.neighbours[node] if distance.get(p) == distance[node] - 1]
        return hops[0] if len(hops) == 1 else None


def session_paths(info: TestbedInfo, flows: Iterable[FlowTuple], label: str, lookup: NextHopLookup) -> SessionPaths:
    """Every connection's path (connections between ranks of one host stay on its loopback and are left out;
    ones whose path cannot be read are counted as ``unresolved``)."""
    walker = _Walker(info, lookup)
    paths, unresolved = [], 0
    for flow in flows:
        if walker.host_of_address.get(flow.src_ip) == walker.host_of_address.get(flow.dst_ip):
            continue
        nodes = walker.path(flow)
        if nodes is None:
            unresolved += 1
        else:
            paths.append(FlowPath(flow.src_rank, flow.dst_rank, nodes, flow.channel))
    return SessionPaths(label, tuple(paths), unresolved)


def read_session_paths(info: TestbedInfo, flows: Iterable[FlowTuple], label: str) -> SessionPaths:
    """:func:`session_paths` asking the testbed's kernels (the testbed must be up)."""
    from genie.testbed.netlink import FlowRoutes

    with FlowRoutes() as routes:
        return session_paths(info, flows, label, routes)
