"""A genie topology as ASTRA-sim network dimensions (pure).

ASTRA-sim's analytical network is a product of dimensions, each a Ring, FullyConnected or Switch of
``npus_count`` NPUs; NPU ``i`` has coordinate ``i % npus[0]`` in dimension 0 (fastest), and so on. genie numbers
ranks host by host (``Topology.rank_hosts``), so ranks of one host are consecutive and become dimension 0 when a
host runs more than one rank. The mapping (``map_topology``):

- **star** (every host has one link, all to the same switch) -> ``Switch`` of the hosts;
- **ring** (no switches; every host has two host links and they close one cycle in host order) -> ``Ring``;
- **full mesh** (no switches; every pair of hosts linked) -> ``FullyConnected``;
- **leaf-spine** (every host on one leaf, equal hosts per leaf, every leaf linked to every spine, nothing else)
  -> one ``Switch`` of all hosts - an approximation: every pair pays the inter-leaf path (host-leaf-spine-leaf-
  host) although pairs on one leaf are two links closer; the bandwidth is the host link, capped by the leaf's
  uplink capacity per host when the fabric is oversubscribed; ECMP collisions are not modelled;
- **ranks per host > 1** -> a first dimension ``FullyConnected`` of the host's ranks (they talk over the
  namespace's loopback: unshaped, so its bandwidth comes from calibration or a default), then the hosts' dimension;
- **multi-GPU nodes** (``nodes:`` in the topology file: every GPU host on its node's NVSwitch over an
  ``intra_node`` link, and one NIC per GPU) -> ``Switch`` of a node's GPUs at the NVLink rate, then ``Switch`` of
  the nodes at the NIC rate, when the NICs are rail-optimized (GPU i of every node on one rail switch, as NCCL's
  rings and trees use them) or all on one switch. NIC links shared by the node's GPUs (``nics: N``) and NICs of
  one GPU index on different switches are refused.

Anything else raises :class:`InputError` saying which host or link breaks the pattern. Bandwidth is the link's
``rate`` in ASTRA-sim's "GB/s" (2^30 bytes per second), latency its one-way ``delay`` per hop (a Switch charges
two hops: host -> switch -> host).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.errors import InputError
from genie.core.topology import Link, LinkRole, Topology

from astra_adapter.config import GIB_BYTES, NetworkConfig, NetworkDim, TopologyKind

#: Loopback between ranks of one host, used when no calibration says otherwise (unshaped; a rough default).
INTRA_HOST_BANDWIDTH_GB_PER_S = 4.0
INTRA_HOST_LATENCY_NS = 20_000.0


class TopologyShape(Enum):
    STAR = "star"
    RING = "ring"
    FULL_MESH = "full_mesh"
    LEAF_SPINE = "leaf_spine"
    GPU_NODES = "gpu_nodes"


class DimRole(Enum):
    """What a dimension stands for: the ranks of one host, or the hosts."""

    INTRA_HOST = "intra_host"
    HOSTS = "hosts"  # the hosts, or the nodes of a multi-GPU topology
    NODE_GPUS = "node_gpus"  # the GPUs of one node, over its NVSwitch


@dataclass(frozen=True)
class MappedDim:
    role: DimRole
    topology: TopologyKind
    npus_count: int
    bandwidth_gb_per_s: float | None  # None: the links are unshaped (calibration must supply it)
    latency_ns: float
    description: str


@dataclass(frozen=True)
class TopologyMapping:
    topology_name: str
    shape: TopologyShape
    ranks_per_host: int
    dims: tuple[MappedDim, ...]
    notes: tuple[str, ...] = ()

    @property
    def npus_count(self) -> int:
        total = 1
        for d in self.dims:
            total *= d.npus_count
        return total

    def dim_of_group(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        """The dimensions a group of ranks spans (where its members' coordinates differ)."""
        spanned = []
        stride = 1
        for i, d in enumerate(self.dims):
            coords = {(r // stride) % d.npus_count for r in ranks}
            if len(coords) > 1:
                spanned.append(i)
            stride *= d.npus_count
        return tuple(spanned)

    def network(self) -> NetworkConfig:
        """network.yml from the link shapes; InputError when a dimension's links have no rate."""
        dims = []
        for i, d in enumerate(self.dims):
            if d.bandwidth_gb_per_s is None:
                raise InputError(f"dimension {i} ({d.description}) has no bandwidth: its links are unshaped; set "
                                 f"a bandwidth in the topology or pass a calibration", source=self.topology_name)
            dims.append(NetworkDim(d.topology, d.npus_count, d.bandwidth_gb_per_s, d.latency_ns))
        return NetworkConfig(tuple(dims))


def gb_per_s(rate_bps: int | None) -> float | None:
    """A link rate in bits/s as ASTRA-sim's "GB/s" (2^30 bytes per second)."""
    return None if rate_bps is None else rate_bps / 8 / GIB_BYTES


def _link_name(link: Link) -> str:
    return f"{link.a}-{link.b}"


def _min_rate(links: list[Link]) -> int | None:
    rates = [l.shape.rate_bps for l in links]
    if any(r is None for r in rates):
        return None
    return min(rates)  # type: ignore[type-var]


def _heterogeneous(links: list[Link], what: str) -> tuple[str, ...]:
    shapes = {(l.shape.rate_bps, l.shape.delay_us) for l in links}
    if len(shapes) <= 1:
        return ()
    return (f"{what} links differ in rate or delay; the dimension uses the slowest rate and the longest delay",)


def map_topology(topology: Topology, *, source: str | None = None) -> TopologyMapping:
    """The ASTRA-sim dimensions of ``topology``; InputError naming why it cannot be mapped."""
    where = source or topology.name
    if not topology.hosts:
        raise InputError("no hosts", source=where)
    counts = {h.ranks for h in topology.hosts}
    if len(counts) > 1:
        shown = ", ".join(f"{h.name}: {h.ranks}" for h in topology.hosts[:4])
        raise InputError(f"hosts run different numbers of ranks ({shown}); ASTRA-sim dimensions need the same "
                         f"number of NPUs per host", source=where, path="hosts")
    rph = counts.pop()
    host_names = [h.name for h in topology.hosts]
    if any(link.role is LinkRole.INTRA_NODE for link in topology.links):
        return _gpu_nodes(topology, host_names, rph, where)
    if len(host_names) * rph < 2:
        raise InputError("a single rank: ASTRA-sim needs at least 2 NPUs", source=where, path="hosts")
    if len(host_names) == 1:
        shape, host_dim, notes = TopologyShape.STAR, None, ()
    else:
        shape, host_dim, notes = _host_dimension(topology, host_names, where)
    dims = []
    if rph > 1:
        dims.append(MappedDim(DimRole.INTRA_HOST, TopologyKind.FULLY_CONNECTED, rph, INTRA_HOST_BANDWIDTH_GB_PER_S,
                              INTRA_HOST_LATENCY_NS, f"{rph} ranks per host (loopback)"))
        notes = (*notes, f"ranks of one host talk over loopback: dimension 0 defaults to "
                         f"{INTRA_HOST_BANDWIDTH_GB_PER_S:g} GB/s, {INTRA_HOST_LATENCY_NS:g} ns unless calibrated")
    if host_dim is not None:
        dims.append(host_dim)
    return TopologyMapping(topology.name, shape, rph, tuple(dims), tuple(notes))


def _host_dimension(topology: Topology, hosts: list[str], where: str) -> tuple[TopologyShape, MappedDim, tuple]:
    switches = {s.name for s in topology.switches}
    host_set = set(hosts)
    host_links: dict[str, list[Link]] = {h: [] for h in hosts}
    for link in topology.links:
        for end in link.endpoints:
            if end in host_set:
                host_links[end].append(link)
    n = len(hosts)
    if not switches:
        return _switchless(topology, hosts, host_links, where)
    for h in hosts:
        links = host_links[h]
        if len(links) != 1:
            raise InputError(f"host {h} has {len(links)} links; a switched topology maps onto ASTRA-sim only when "
                             f"every host has exactly one link (to its switch)", source=where, path="links")
        other = links[0].b if links[0].a == h else links[0].a
        if other not in switches:
            raise InputError(f"host {h} links to host {other} in a switched topology; ASTRA-sim dimensions cannot "
                             f"express a mix of switch and direct host links", source=where, path="links")
    leaf_of = {h: (host_links[h][0].b if host_links[h][0].a == h else host_links[h][0].a) for h in hosts}
    leaves = sorted(set(leaf_of.values()))
    first = [host_links[h][0] for h in hosts]
    if len(switches) == 1:
        rate, delay = _min_rate(first), max(l.shape.delay_us for l in first)
        return TopologyShape.STAR, MappedDim(DimRole.HOSTS, TopologyKind.SWITCH, n, gb_per_s(rate), delay * 1000,
                                             f"{n} hosts on switch {leaves[0]}"), _heterogeneous(first, "host")
    return _leaf_spine(topology, hosts, leaf_of, leaves, switches, first, where)


def _leaf_spine(topology: Topology, hosts: list[str], leaf_of: dict[str, str], leaves: list[str],
                switches: set[str], host_links: list[Link], where: str) -> tuple[TopologyShape, MappedDim, tuple]:
    spines = sorted(switches - set(leaves))
    if len(leaves) < 2 or not spines:
        raise InputError(f"{len(switches)} switches but {len(leaves)} with hosts and {len(spines)} without: only a "
                         f"star (one switch) or a two-level leaf-spine (leaves with hosts, spines without) maps onto "
                         f"ASTRA-sim", source=where, path="switches")
    per_leaf = {leaf: sum(1 for h in hosts if leaf_of[h] == leaf) for leaf in leaves}
    if len(set(per_leaf.values())) > 1:
        shown = ", ".join(f"{k}: {v}" for k, v in per_leaf.items())
        raise InputError(f"leaves hold different numbers of hosts ({shown}); the leaf-spine mapping needs equal "
                         f"leaves", source=where, path="links")
    fabric: dict[tuple[str, str], Link] = {}
    for link in topology.links:
        a, b = link.endpoints
        if a in switches and b in switches:
            if (a in leaves) == (b in leaves):
                kind = "leaf" if a in leaves else "spine"
                raise InputError(f"link {_link_name(link)} joins two {kind} switches; only leaf-spine links are "
                                 f"allowed between switches", source=where, path="links")
            leaf, spine = (a, b) if a in leaves else (b, a)
            if (leaf, spine) in fabric:
                raise InputError(f"leaf {leaf} and spine {spine} are linked twice", source=where, path="links")
            fabric[(leaf, spine)] = link
    for leaf in leaves:
        for spine in spines:
            if (leaf, spine) not in fabric:
                raise InputError(f"leaf {leaf} has no link to spine {spine}; the leaf-spine mapping needs every leaf "
                                 f"linked to every spine", source=where, path="links")
    host_rate = _min_rate(host_links)
    uplink_rates = [l.shape.rate_bps for l in fabric.values()]
    rate = host_rate
    notes = ["leaf-spine mapped to one Switch dimension: every pair is charged the inter-leaf path "
             "(host-leaf-spine-leaf-host) although pairs on one leaf are two links closer; ECMP collisions "
             "are not modelled"]
    if host_rate is not None and all(r is not None for r in uplink_rates):
        share = min(sum(fabric[(leaf, s)].shape.rate_bps for s in spines) for leaf in leaves) / per_leaf[leaves[0]]
        if share < host_rate:
            rate = int(share)
            notes.append(f"the fabric is oversubscribed: bandwidth is the leaf uplink capacity per host "
                         f"({share / 1e9:g} Gbit/s)")
    delay_us = max(l.shape.delay_us for l in host_links) + max(l.shape.delay_us for l in fabric.values())
    notes.extend(_heterogeneous(host_links, "host"))
    dim = MappedDim(DimRole.HOSTS, TopologyKind.SWITCH, len(hosts), gb_per_s(rate), delay_us * 1000,
                    f"{len(hosts)} hosts on {len(leaves)} leaves x {len(spines)} spines (as one switch)")
    return TopologyShape.LEAF_SPINE, dim, tuple(notes)


def _switchless(topology: Topology, hosts: list[str], host_links: dict[str, list[Link]],
                where: str) -> tuple[TopologyShape, MappedDim, tuple]:
    n = len(hosts)
    links = list(topology.links)
    pairs = {frozenset(l.endpoints) for l in links}
    if len(pairs) != len(links):
        raise InputError("two links join the same pair of hosts", source=where, path="links")
    rate, delay = _min_rate(links), max((l.shape.delay_us for l in links), default=0.0)
    notes = _heterogeneous(links, "host")
    ring_pairs = {frozenset((hosts[i], hosts[(i + 1) % n])) for i in range(n)}
    if n >= 3 and pairs == ring_pairs:
        return TopologyShape.RING, MappedDim(DimRole.HOSTS, TopologyKind.RING, n, gb_per_s(rate), delay * 1000,
                                             f"{n} hosts in a ring"), notes
    if len(pairs) == n * (n - 1) // 2:
        return TopologyShape.FULL_MESH, MappedDim(DimRole.HOSTS, TopologyKind.FULLY_CONNECTED, n, gb_per_s(rate),
                                                  delay * 1000, f"{n} hosts fully connected"), notes
    for h in hosts:
        if len(host_links[h]) != 2:
            raise InputError(f"host {h} has {len(host_links[h])} links: without switches only a ring (two links "
                             f"per host) or a full mesh maps onto ASTRA-sim", source=where, path="links")
    for i, h in enumerate(hosts):
        nxt = hosts[(i + 1) % n]
        if frozenset((h, nxt)) not in pairs:
            neighbours = sorted(l.b if l.a == h else l.a for l in host_links[h])
            raise InputError(f"the ring does not follow host (rank) order: {h} links to {', '.join(neighbours)}, "
                             f"not {nxt}; ASTRA-sim's Ring places NPU i next to i+1", source=where, path="links")
    raise InputError("hosts are linked neither as one ring in host order nor as a full mesh", source=where,
                     path="links")


def _gpu_nodes(topology: Topology, hosts: list[str], ranks_per_host: int, where: str) -> TopologyMapping:
    """Multi-GPU nodes with rail-optimized (or single-switch) NICs as two Switch dimensions (see the module doc)."""
    if ranks_per_host != 1:
        raise InputError(f"GPU hosts run {ranks_per_host} ranks each; the node mapping needs one rank per GPU",
                         source=where, path="hosts")
    host_set = set(hosts)
    node_of: dict[str, str] = {}
    nvlinks: list[Link] = []
    nics: dict[str, list[Link]] = {h: [] for h in hosts}
    for link in topology.links:
        ends = [e for e in link.endpoints if e in host_set]
        if link.role is LinkRole.INTRA_NODE:
            if len(ends) != 1:
                raise InputError(f"intra_node link {_link_name(link)} does not join a GPU host to its node's "
                                 f"switch", source=where, path="links")
            node_of[ends[0]] = link.b if link.a == ends[0] else link.a
            nvlinks.append(link)
        else:
            for e in ends:
                nics[e].append(link)
    missing = [h for h in hosts if h not in node_of]
    if missing:
        raise InputError(f"host {missing[0]} has no intra_node (NVLink) link while other hosts do; ASTRA-sim's "
                         f"dimensions need every host in a node of equal size", source=where, path="links")
    nodes: dict[str, list[str]] = {}
    for h in hosts:
        nodes.setdefault(node_of[h], []).append(h)
    order = [node_of[h] for h in hosts]
    if any(order[i] != order[i - 1] and order[i] in order[:i] for i in range(1, len(order))):
        raise InputError("a node's GPUs are not consecutive ranks; ASTRA-sim's first dimension is consecutive NPUs",
                         source=where, path="nodes")
    sizes = {len(v) for v in nodes.values()}
    if len(sizes) > 1:
        shown = ", ".join(f"{k}: {len(v)}" for k, v in list(nodes.items())[:4])
        raise InputError(f"nodes have different GPU counts ({shown}); ASTRA-sim dimensions need equal nodes",
                         source=where, path="nodes")
    gpus = sizes.pop()
    for h in hosts:
        if len(nics[h]) != 1:
            raise InputError(f"GPU {h} has {len(nics[h])} NIC links; the node mapping needs one NIC per GPU "
                             f"(nics: per-gpu)", source=where, path="nodes.nics")
    rail_of = {h: (nics[h][0].b if nics[h][0].a == h else nics[h][0].a) for h in hosts}
    members = list(nodes.values())
    rails = {rail_of[h] for h in hosts}
    notes: list[str] = []
    if len(rails) > 1 and len(members) > 1:
        for g in range(gpus):
            on = {rail_of[node[g]] for node in members}
            if len(on) != 1:
                raise InputError(f"the NICs of GPU {g} are on {', '.join(sorted(on))}: the node mapping needs every "
                                 f"node's GPU {g} on one rail switch (rail-optimized) or all NICs on one switch",
                                 source=where, path="nodes.rails")
        notes.append(f"{len(rails)} rails: a group of one GPU index across nodes stays on its rail switch; a group "
                     f"spanning GPU indices and nodes runs in both dimensions (NVLink first), as NCCL's "
                     f"hierarchical algorithms do; cross-rail paths through the spines are not modelled")
    nic_links = [nics[h][0] for h in hosts]
    notes.extend(_heterogeneous(nvlinks, "NVLink"))
    notes.extend(_heterogeneous(nic_links, "NIC"))
    dims: list[MappedDim] = [MappedDim(DimRole.NODE_GPUS, TopologyKind.SWITCH, gpus, gb_per_s(_min_rate(nvlinks)),
                                       max(l.shape.delay_us for l in nvlinks) * 1000,
                                       f"{gpus} GPUs of a node on its NVSwitch")]
    if len(members) > 1:
        dims.append(MappedDim(DimRole.HOSTS, TopologyKind.SWITCH, len(members), gb_per_s(_min_rate(nic_links)),
                              max(l.shape.delay_us for l in nic_links) * 1000,
                              f"{len(members)} nodes on {len(rails)} rail switch(es)"))
    return TopologyMapping(topology.name, TopologyShape.GPU_NODES, 1, tuple(dims), tuple(notes))
