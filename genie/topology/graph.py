"""The topology as a graph: neighbours, hop distances, connectivity and bridged segments. Pure functions."""

from __future__ import annotations

from collections import deque

from genie.core.topology import SwitchKind, Topology


def adjacency(topology: Topology) -> dict[str, tuple[str, ...]]:
    """Neighbours of every node (hosts, then switches, in file order), each list in link order.

    Links naming unknown nodes are ignored; validation reports them.
    """
    neighbours: dict[str, list[str]] = {name: [] for name in topology.node_names()}
    for link in topology.links:
        if link.a in neighbours and link.b in neighbours and link.a != link.b:
            neighbours[link.a].append(link.b)
            neighbours[link.b].append(link.a)
    return {name: tuple(peers) for name, peers in neighbours.items()}


def hop_distances(neighbours: dict[str, tuple[str, ...]], origin: str) -> dict[str, int]:
    """Hop count from `origin` to every node it can reach (breadth-first search); origin itself is 0."""
    distance = {origin: 0}
    queue = deque([origin])
    while queue:
        node = queue.popleft()
        for peer in neighbours[node]:
            if peer not in distance:
                distance[peer] = distance[node] + 1
                queue.append(peer)
    return distance


def bridges(topology: Topology) -> frozenset[str]:
    return frozenset(s.name for s in topology.switches if s.kind is SwitchKind.BRIDGE)


def bridged_segments(topology: Topology) -> dict[str, int]:
    """Which L2 segment each bridge belongs to: bridges linked directly to each other share one segment.

    Returns bridge name -> segment number (numbered in switch order).
    """
    bridge_names = bridges(topology)
    neighbours = {
        name: tuple(peer for peer in peers if peer in bridge_names)
        for name, peers in adjacency(topology).items()
        if name in bridge_names
    }
    segment: dict[str, int] = {}
    for name in (s.name for s in topology.switches if s.name in bridge_names):
        if name not in segment:
            number = len(set(segment.values()))
            for member in hop_distances(neighbours, name):
                segment[member] = number
    return segment
