"""A genie topology as a flow network: directed link resources, link classes and ECMP routes (pure).

Every full-duplex link is two resources (one per direction, as tc shapes each veth end), with the link's
rate and delay. Routes follow the testbed's: shortest paths by hop count over every node (bridges, routers and
forwarding hosts alike), as :func:`genie.topology.routing.shortest_paths_next_hops` computes them from the
same :mod:`genie.topology.graph` functions, and at every node with several equal-cost next hops the kernel
hashes each flow (its 5-tuple, ``fib_multipath_hash_policy=3``) onto one of them. The ports are ephemeral, so the
assignment is not known in advance: a route carries the *expected share* - a flow splits evenly over the next
hops at every branch, which is each link's expected load under uniform hashing. With a ``hash_seed`` the network
is instead one *draw* of the hash: every connection (a pair of ranks: each has its own ports) takes one next hop
at every branch, chosen uniformly and deterministically from the seed - what one testbed session does; the
mean over several draws is the expected time under hashing, collisions included
(:func:`astra_adapter.fabric.estimate.estimate_fabric`'s ``ecmp_samples``). With ``paths`` (the paths a
testbed session's connections really took, :class:`genie.core.flowpath.SessionPaths`) a flow of a traced
pair takes its channel's connection's path (an op whose channel is not known: split evenly over the pair's
connections); the rest as above.

Ranks of one host talk over the namespace's loopback: one ``loopback`` resource per host (unshaped; its rate
is calibrated or :data:`LOOPBACK_RATE_BPS`).

Link classes (what calibration fits separately): ``host`` (a link with a host at one end), ``fabric`` (between
two switches), ``intra_node`` (a multi-GPU node's NVLink: links of role ``intra_node``) and ``loopback``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum

import numpy as np

from genie.core.errors import InputError, parse_enum_value
from genie.core.flowpath import SessionPaths
from genie.core.tcp_window import queue_limit_bytes
from genie.core.topology import LinkRole, Topology
from genie.topology.graph import adjacency, hop_distances

LOOPBACK_RATE_BPS = 32_000_000_000  # ~4 GB/s, as astra_adapter.mapping's intra-host default
UNSHAPED_RATE_BPS = 10_000_000_000  # an unshaped veth, when neither the topology nor a calibration says


class LinkClass(Enum):
    HOST = "host"
    FABRIC = "fabric"
    LOOPBACK = "loopback"
    INTRA_NODE = "intra_node"  # NVLink / NVSwitch inside a multi-GPU node (a topology's ``nodes``)

    @classmethod
    def parse(cls, text: str, *, source: str | None = None, path: str | None = None) -> "LinkClass":
        return parse_enum_value(cls, text, "link class", source=source, path=path)


@dataclass(frozen=True)
class Resource:
    """One direction of a link (``a -> b``), or a host's loopback (``a == b``)."""

    a: str
    b: str
    link_class: LinkClass
    rate_bps: int
    delay_ns: float
    shaped: bool
    queue_limit_bytes: int = 0  # what its queue holds at most (genie.core.tcp_window.queue_limit_bytes); 0: none


@dataclass(frozen=True)
class Route:
    """A flow's expected load: ``(resource index, fraction of the flow)`` and the path delay (expected)."""

    loads: tuple[tuple[int, float], ...]
    delay_ns: float


class FabricNetwork:
    """Resources and memoised routes of one topology; ``route(src_rank, dst_rank)`` is a route id."""

    def __init__(self, topology: Topology, *, source: str | None = None, hash_seed: int | None = None,
                 paths: SessionPaths | None = None) -> None:
        self.topology = topology
        self.source = source or topology.name
        self.hash_seed = hash_seed
        self.paths = paths
        self._observed = paths.by_pair() if paths is not None else {}
        self._by_channel = paths.by_channel() if paths is not None else {}
        self.rank_hosts = topology.rank_hosts()
        if not self.rank_hosts:
            raise InputError("no hosts", source=self.source, path="hosts")
        hosts = {h.name for h in topology.hosts}
        self.resources: list[Resource] = []
        self.index: dict[tuple[str, str], int] = {}
        for link in topology.links:
            if link.role is LinkRole.INTRA_NODE:
                cls = LinkClass.INTRA_NODE
            else:
                cls = LinkClass.HOST if (link.a in hosts or link.b in hosts) else LinkClass.FABRIC
            shaped = link.shape.rate_bps is not None
            rate = link.shape.rate_bps or UNSHAPED_RATE_BPS
            for a, b in ((link.a, link.b), (link.b, link.a)):
                if (a, b) in self.index:
                    raise InputError(f"nodes {a} and {b} are linked twice; the fabric model needs one link per pair",
                                     source=self.source, path="links")
                self.index[(a, b)] = len(self.resources)
                self.resources.append(Resource(a, b, cls, rate, link.shape.delay_us * 1000, shaped,
                                               queue_limit_bytes(link.shape.queue_packets, link.shape.mtu_bytes)
                                               if shaped else 0))
        for h in topology.hosts:
            if h.ranks > 1:
                self.index[(h.name, h.name)] = len(self.resources)
                self.resources.append(Resource(h.name, h.name, LinkClass.LOOPBACK, LOOPBACK_RATE_BPS, 0.0, False))
        self.neighbours = adjacency(topology)
        self._distances: dict[str, dict[str, int]] = {}
        self._route_ids: dict[tuple[str, str], int] = {}
        self._coflow_ids: dict[bytes, int] = {}
        self.routes: list[Route] = []

    @property
    def world_size(self) -> int:
        return len(self.rank_hosts)

    def classes(self) -> tuple[LinkClass, ...]:
        present = {r.link_class for r in self.resources}
        return tuple(c for c in LinkClass if c in present)

    def with_hash_seed(self, seed: int | None) -> "FabricNetwork":
        """This network with another draw of the ECMP hash. The hop distances (the topology's alone) are one
        memo shared with this network's other draws: a 1024-host draw computes them once per process, not once
        per draw (~0.3 s each)."""
        drawn = FabricNetwork(self.topology, source=self.source, hash_seed=seed, paths=self.paths)
        drawn._distances = self._distances
        return drawn

    def with_paths(self, paths: SessionPaths) -> "FabricNetwork":
        """This network with the routes one session's connections took (the hash draw it got)."""
        return FabricNetwork(self.topology, source=self.source, paths=paths)

    def took(self, paths: SessionPaths) -> bool:
        """True when every path of ``paths`` runs from its source rank's host to its destination rank's over
        links of this topology (paths read on another topology, or another placement of the ranks, do not)."""
        hosts = self.rank_hosts
        return all(0 <= p.src_rank < len(hosts) and 0 <= p.dst_rank < len(hosts) and p.nodes
                   and p.nodes[0] == hosts[p.src_rank] and p.nodes[-1] == hosts[p.dst_rank]
                   and all((a, b) in self.index for a, b in zip(p.nodes, p.nodes[1:])) for p in paths.paths)

    @property
    def multipath(self) -> bool:
        """True when some pair of hosts has more than one shortest path (ECMP)."""
        hosts = [h.name for h in self.topology.hosts]
        for dst in hosts:
            distance = self._distance(dst)
            for node, hops in distance.items():
                if hops > 1 and sum(1 for p in self.neighbours[node] if distance.get(p) == hops - 1) > 1:
                    return True
        return False

    def route(self, src_rank: int, dst_rank: int, channel: int | None = None) -> int:
        """The route id of a flow from ``src_rank`` to ``dst_rank``; with traced paths, on the connection of
        ``channel`` where it was traced, else spread over the pair's connections."""
        src, dst = self.rank_hosts[src_rank], self.rank_hosts[dst_rank]
        observed = None
        if src != dst and self._observed:
            path = self._by_channel.get((src_rank, dst_rank, channel)) if channel is not None else None
            observed = (path,) if path is not None else self._observed.get((src_rank, dst_rank))
            channel = channel if path is not None else None
        key = (src, dst) if (self.hash_seed is None and observed is None) or src == dst else (
            (src_rank, dst_rank) if channel is None else (src_rank, dst_rank, channel))
        rid = self._route_ids.get(key)
        if rid is None:
            rid = self._route_ids[key] = len(self.routes)
            route = self._observed_route(observed) if observed else None
            if route is None:
                rng = None if self.hash_seed is None else random.Random(f"{self.hash_seed}:{src_rank}:{dst_rank}")
                route = self._expected_route(src, dst, rng)
            self.routes.append(route)
        return rid

    def coflow_route(self, members: "np.ndarray") -> int:
        """The route id of one flow loading every resource as the routes ``members`` (route ids) together do: per
        resource the sum of their fractions there (summed in ascending member order), its delay their longest
        (the coflow ring, :mod:`astra_adapter.fabric.coflow`). Memoised on the members."""
        ids = np.sort(np.asarray(members, dtype=np.int64))
        key = ids.tobytes()
        rid = self._coflow_ids.get(key)
        if rid is None:
            loads: dict[int, float] = {}
            for r in ids.tolist():
                for res, w in self.routes[r].loads:
                    loads[res] = loads.get(res, 0.0) + w
            rid = self._coflow_ids[key] = len(self.routes)
            self.routes.append(Route(tuple(sorted(loads.items())),
                                     max((self.routes[r].delay_ns for r in ids.tolist()), default=0.0)))
        return rid

    def _observed_route(self, paths: tuple[tuple[str, ...], ...]) -> Route | None:
        """The load of connections that took `paths` (one each, split evenly); None if a path crosses a link
        this topology does not have (then the expected share stands)."""
        loads: dict[int, float] = {}
        delay = 0.0
        part = 1.0 / len(paths)
        for nodes in paths:
            for a, b in zip(nodes, nodes[1:]):
                rid = self.index.get((a, b))
                if rid is None:
                    return None
                loads[rid] = loads.get(rid, 0.0) + part
                delay += part * self.resources[rid].delay_ns
        return Route(tuple(sorted(loads.items())), delay)

    def hops_from(self, host: str) -> dict[str, int]:
        """Every node's hop distance from ``host`` (the links are both ways: also its distance to ``host``),
        memoised per topology - shared by this network's hash draws (:meth:`with_hash_seed`)."""
        return self._distance(host)

    def _distance(self, dst: str) -> dict[str, int]:
        distance = self._distances.get(dst)
        if distance is None:
            distance = self._distances[dst] = hop_distances(self.neighbours, dst)
        return distance

    def _expected_route(self, src: str, dst: str, rng: random.Random | None = None) -> Route:
        if src == dst:
            return Route(((self.index[(src, src)], 1.0),), 0.0)
        distance = self._distance(dst)
        if src not in distance:
            raise InputError(f"no path from host {src} to host {dst}: the fabric model cannot route it",
                             source=self.source, path="links")
        share = {src: 1.0}
        frontier = [src]
        loads: dict[int, float] = {}
        delay = 0.0
        for _ in range(distance[src]):
            nxt: dict[str, float] = {}
            for node in frontier:
                hops = [p for p in self.neighbours[node] if distance.get(p) == distance[node] - 1]
                if rng is not None:
                    hops = [hops[rng.randrange(len(hops))]]
                part = share[node] / len(hops)
                for p in hops:
                    rid = self.index[(node, p)]
                    loads[rid] = loads.get(rid, 0.0) + part
                    delay += part * self.resources[rid].delay_ns
                    nxt[p] = nxt.get(p, 0.0) + part
            share = nxt
            frontier = list(nxt)
        return Route(tuple(sorted(loads.items())), delay)

    def check_connected(self) -> None:
        """InputError naming the first pair of ranks' hosts with no path between them."""
        hosts = [h.name for h in self.topology.hosts if h.ranks > 0]
        if len(hosts) < 2:
            return
        reach = hop_distances(self.neighbours, hosts[0])
        for h in hosts[1:]:
            if h not in reach:
                raise InputError(f"no path from host {hosts[0]} to host {h}: the topology is disconnected and the "
                                 f"fabric model cannot route it", source=self.source, path="links")


def sample_networks(network: FabricNetwork, ecmp_samples: int) -> list[FabricNetwork]:
    """The networks to average over: ``ecmp_samples`` draws of the ECMP hash where the topology has equal-cost
    paths (and ``ecmp_samples > 0``), else the expected-share network alone."""
    if ecmp_samples <= 0 or not network.multipath:
        return [network]
    return [network.with_hash_seed(k) for k in range(ecmp_samples)]
