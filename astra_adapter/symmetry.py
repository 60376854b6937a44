"""Symmetric ranks: classes of ranks whose runs are identical, so that one representative stands for each.

A 3D-parallel trace of 1024 ranks typically has as many distinct timelines as pipeline stages. Two ranks are
put in the same class when (partition refinement, to a fixed point):

- their node lists are equal (:class:`~astra_adapter.work.WorkNode` ignores who the partners are);
- every send/receive goes the same network distance to a peer of the same class, matched (FIFO per tag,
  src, dst, size, in node order) to the same node of that peer;
- every process-group collective runs on a ring that looks the same from the rank (hops between successive
  members, starting at the rank) whose members' classes, in ring order from the rank, are the same;
- world collectives see the same classes along every dimension they use.

- a collective whose algorithm depends on the rank's position (double binary tree, ``one*`` rings) sees the
  same position.

The engine then simulates one representative per class and gives every member of a phase its class
representative's start (:class:`~astra_adapter.streams.CollectiveScheduler`). No reduction (None) when a
remote-memory port is shared between ranks or sends and receives do not pair up.
"""

from __future__ import annotations

from genie.core.errors import GenieError

from astra_adapter.collective_plan import logical_dims
from astra_adapter.config import ImplKind, MemoryType, RemoteMemoryConfig, SystemConfig, TopologyKind
from astra_adapter.network import AnalyticalNetwork
from astra_adapter.work import OpKind, RankWork

_POSITIONAL = (ImplKind.DOUBLE_BINARY_TREE, ImplKind.ONE_RING, ImplKind.ONE_DIRECT, ImplKind.ONE_HALVING_DOUBLING)


def _number(signatures: list) -> list[int]:
    ids: dict = {}
    return [ids.setdefault(sig, len(ids)) for sig in signatures]


def _p2p_matching(work: tuple[RankWork, ...]) -> dict[tuple[int, int], tuple[int, int]] | None:
    """(rank, node index) -> (peer rank, peer node index) of every send and receive, or None if unmatched."""
    sends: dict[tuple, list[int]] = {}
    recvs: dict[tuple, list[int]] = {}
    for w in work:
        for i, node in enumerate(w.nodes):
            if node.op is OpKind.SEND:
                sends.setdefault((node.tag, w.rank, w.peers[i], node.size_bytes), []).append(i)
            elif node.op is OpKind.RECV:
                recvs.setdefault((node.tag, w.peers[i], w.rank, node.size_bytes), []).append(i)
    if sends.keys() != recvs.keys():
        return None
    matching = {}
    for key, send_list in sends.items():
        recv_list = recvs[key]
        if len(recv_list) != len(send_list):
            return None
        _, src, dst, _ = key
        for i, j in zip(send_list, recv_list):
            matching[(src, i)] = (dst, j)
            matching[(dst, j)] = (src, i)
    return matching


def _ring_from(members: tuple[int, ...], rank: int) -> tuple[int, ...]:
    k = members.index(rank)
    return members[k:] + members[:k]


class _Roles:
    """Each rank's partners, collected once: p2p nodes, distinct groups used, world dimensions used."""

    def __init__(self, w: RankWork, rings: dict[str, tuple[int, ...] | None], network: AnalyticalNetwork,
                 positional: dict, matching: dict) -> None:
        self.p2p: list[tuple[int, int]] = []  # (peer, peer node index)
        self.rings: list[tuple[int, ...]] = []  # distinct group rings, from this rank, in order of first use
        self.world_dims: set[int] = set()
        local: list = []  # per partnered node: what it depends on, without partner classes
        group_index: dict[str, int] = {}
        send, recv, collective = OpKind.SEND, OpKind.RECV, OpKind.COLLECTIVE
        for i, node in enumerate(w.nodes):
            op = node.op
            if op is send or op is recv:
                peer, j = matching[(w.rank, i)]
                self.p2p.append((peer, j))
                local.append(network.hops(w.rank, peer) if peer != w.rank else None)
            elif op is collective:
                name = w.groups[i]
                members = rings.get(name) if name else None
                if name and name not in rings:
                    raise _NotSymmetric
                if members is not None:
                    if w.rank not in members:
                        raise _NotSymmetric
                    k = group_index.get(name)
                    if k is None:
                        k = group_index[name] = len(self.rings)
                        ring = _ring_from(members, w.rank)
                        self.rings.append(ring)
                        local.append(tuple(network.hops(ring[pos - 1], ring[pos]) for pos in range(len(ring))))
                    local.append(k)
                    continue
                where = positional.get(node.comm)
                if where is not None:
                    local.append(w.rank if where == "all" else tuple(network.coordinate(w.rank, d) for d in where))
                involved = node.involved_dims
                self.world_dims.update(d for d in range(network.dims_count)
                                       if involved is None or d >= len(involved) or involved[d])
        self.local = tuple(local)


class _NotSymmetric(Exception):
    pass


def rank_classes(work: tuple[RankWork, ...], groups: dict[str, tuple[int, ...]], network: AnalyticalNetwork,
                 system: SystemConfig, remote: RemoteMemoryConfig | None = None) -> tuple[int, ...] | None:
    """The representative (smallest rank) of each rank's class, or None when the reduction would not be exact."""
    if remote is not None and remote.memory_type in (MemoryType.PER_NODE_MEMORY_EXPANSION, MemoryType.MEMORY_POOL):
        if any(node.op is OpKind.REMOTE_MEM for w in work for node in w.nodes):
            return None  # ranks queue on shared memory ports
    matching = _p2p_matching(work)
    if matching is None:
        return None
    positional: dict = {}  # comm -> network dims whose position matters, or "all"
    for comm in {node.comm for w in work for node in w.nodes if node.op is OpKind.COLLECTIVE}:
        try:
            dims = logical_dims(system, comm, network.config.npus_per_dim)
        except GenieError:
            return None  # let the full run report it
        if any(d.impl.kind in _POSITIONAL and d.network_dim is None for d in dims):
            positional[comm] = "all"
        elif any(d.impl.kind in _POSITIONAL for d in dims):
            positional[comm] = tuple(d.network_dim for d in dims if d.impl.kind in _POSITIONAL)
    rings = {name: (members if len(members) < network.npus_count else None) for name, members in groups.items()}
    try:
        roles = [_Roles(w, rings, network, positional, matching) for w in work]
    except _NotSymmetric:
        return None
    world_rings = {d: {} for d in range(network.dims_count)}

    def world_ring(rank: int, d: int) -> tuple[int, ...]:
        ring = world_rings[d].get(rank)
        if ring is None:
            ring = world_rings[d][rank] = _ring_from(network.dim_members(rank, d), rank)
        return ring

    classes = _number([(w.nodes, roles[w.rank].local, tuple(sorted(roles[w.rank].world_dims))) for w in work])
    count = len(set(classes))
    while True:
        signatures = []
        for w in work:
            role = roles[w.rank]
            signatures.append((
                classes[w.rank],
                tuple((classes[peer], j) for peer, j in role.p2p),
                tuple(tuple(classes[m] for m in ring) for ring in role.rings),
                tuple(tuple(classes[m] for m in world_ring(w.rank, d)) for d in sorted(role.world_dims)),
            ))
        refined = _number(signatures)
        refined_count = len(set(refined))
        classes = refined
        if refined_count == count:
            break
        count = refined_count
    representative: dict[int, int] = {}
    return tuple(representative.setdefault(c, w.rank) for w, c in zip(work, classes))


_ROTATION_INVARIANT = (ImplKind.RING, ImplKind.DIRECT)


def mirrored_links(work: tuple[RankWork, ...], groups: dict[str, tuple[int, ...]], network: AnalyticalNetwork,
                   links, system: SystemConfig, representatives: tuple[int, ...] | None) -> bool:
    """Can one rank stand for all in the congestion-aware network (:class:`~astra_adapter.live_phases.
    LivePhases` with ``mirror``)? Yes when

    - every rank is in one class (:func:`rank_classes`), with no sends, receives or remote-memory accesses, and
      every collective on the world (no smaller process group);
    - every algorithm is the same seen from any rank of the ring 0..n-1 (``ring``, ``direct``; not the
      positional ``halvingDoubling``, ``doubleBinaryTree`` or ``one*``), so that rotating the ranks maps the run
      onto itself: rank r receives from r-k exactly when r's own message to r+k arrives;
    - every link carries the chunks of a single source rank (``links.route`` of every pair the algorithms
      use), so the queue of each link the representative uses holds only the representative's own chunks.
    """
    if representatives is None or any(representatives):
        return False
    n = links.npus_count
    rank0 = work[0]
    kinds: set[ImplKind] = set()
    for i, node in enumerate(rank0.nodes):
        if node.op in (OpKind.SEND, OpKind.RECV, OpKind.REMOTE_MEM):
            return False
        if node.op is not OpKind.COLLECTIVE:
            continue
        group = rank0.groups[i]
        if group and len(groups.get(group, ())) < n:
            return False
        try:
            dims = logical_dims(system, node.comm, network.config.npus_per_dim)
        except GenieError:
            return False
        for d in dims:
            if d.impl.kind not in _ROTATION_INVARIANT or d.network_dim is None:
                return False
            kinds.add(d.impl.kind)
    if not kinds:
        return False
    if links.kind is TopologyKind.FULLY_CONNECTED:
        return True  # one link per ordered pair: a single source by construction
    pairs = [(r, (r + 1) % n) for r in range(n)]
    if ImplKind.DIRECT in kinds:
        pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    source: dict[tuple[int, int], int] = {}
    for src, dst in pairs:
        path = links.route(src, dst)
        for hop in zip(path, path[1:]):
            if source.setdefault(hop, src) != src:
                return False
    return True
