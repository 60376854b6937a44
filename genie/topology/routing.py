"""Equal-cost shortest paths toward every host, for the testbed planner's static routes and ECMP groups.

Cost is the hop count; every node is a hop, bridges included, and hosts with several links forward traffic
(a ring has no switches at all). Pure: no netlink, no addresses — the planner turns next-hop *nodes* into
gateways and interfaces.
"""

from __future__ import annotations

from genie.core.topology import Topology
from genie.topology.graph import adjacency, hop_distances

NextHops = dict[tuple[str, str], tuple[str, ...]]


def shortest_paths_next_hops(topology: Topology) -> NextHops:
    """``{(src_node, dst_host): (next_hop_node, ...)}`` for every node and every other host it can reach.

    The tuple holds *all* neighbours of ``src_node`` that lie on a shortest path to ``dst_host`` (the ECMP set),
    in the topology's node order (hosts, then switches, in file order); keys are sorted by (src, dst) in the
    same order, so the result is deterministic.
    A next hop may be ``dst_host`` itself (directly linked) or a bridge (the planner resolves a bridge to the
    host or router behind it). Pairs with ``src_node == dst_host`` and unreachable pairs are absent.
    Expects a validated topology.
    """
    neighbours = adjacency(topology)
    order = {name: index for index, name in enumerate(topology.node_names())}
    next_hops: NextHops = {}
    for host in topology.hosts:
        distance = hop_distances(neighbours, host.name)
        for src, hops in distance.items():
            if src == host.name:
                continue
            closer = {peer for peer in neighbours[src] if distance.get(peer) == hops - 1}
            next_hops[(src, host.name)] = tuple(sorted(closer, key=order.__getitem__))
    return dict(sorted(next_hops.items(), key=lambda item: (order[item[0][0]], order[item[0][1]])))


def hop_count(topology: Topology, src: str, dst: str) -> int:
    """Hops on a shortest path from node `src` to node `dst`; KeyError when unreachable."""
    return hop_distances(adjacency(topology), dst)[src]
