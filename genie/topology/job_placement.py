"""Where a job mix's ranks run (pure): host slots per job from explicit hosts or a placement policy over the
topology graph.

A host slot is a global rank of the topology (ranks numbered host by host in file order). A host's *leaf* is
the switch its network link goes to (a multi-GPU node's GPUs: the node's switch over their NVLink links, so
``packed`` fills a node first); hosts with no switch neighbour are their own leaf. Leaves are ordered by
their first host. ``packed`` takes the free slots leaf by leaf, ``spread`` one slot of each leaf in turn (a
leaf's hosts in order), ``random`` a seeded sample of the free slots (in slot order). Jobs with explicit
hosts are placed first, then the others in file order on what is left.
"""

from __future__ import annotations

import random

from genie.core.errors import InputError
from genie.core.jobmix import JobPlacement, PlacementPolicy
from genie.core.topology import LinkRole, Topology


def host_leaves(topology: Topology) -> dict[str, str]:
    """Host name -> its leaf (see the module)."""
    switches = {s.name for s in topology.switches}
    network: dict[str, str] = {}
    intra: dict[str, str] = {}
    for link in topology.links:
        for host, peer in ((link.a, link.b), (link.b, link.a)):
            if peer in switches:
                target = intra if link.role is LinkRole.INTRA_NODE else network
                target.setdefault(host, peer)
    return {h.name: intra.get(h.name) or network.get(h.name) or h.name for h in topology.hosts}


def leaf_slots(topology: Topology) -> tuple[tuple[int, ...], ...]:
    """The host slots under each leaf, leaves in order of their first host, slots in rank order."""
    leaves = host_leaves(topology)
    grouped: dict[str, list[int]] = {}
    for slot, host in enumerate(topology.rank_hosts()):
        grouped.setdefault(leaves[host], []).append(slot)
    return tuple(tuple(s) for s in grouped.values())


def policy_slots(policy: PlacementPolicy, seed: int, ranks: int, free: list[int],
                 topology: Topology) -> tuple[int, ...]:
    """``ranks`` slots of ``free`` chosen by ``policy``; the caller checks there are enough."""
    free_set = set(free)
    if policy is PlacementPolicy.RANDOM:
        return tuple(sorted(random.Random(seed).sample(sorted(free_set), ranks)))
    leaves = [[s for s in leaf if s in free_set] for leaf in leaf_slots(topology)]
    if policy is PlacementPolicy.PACKED:
        return tuple([s for leaf in leaves for s in leaf][:ranks])
    out: list[int] = []
    depth = 0
    while len(out) < ranks:
        for leaf in leaves:
            if depth < len(leaf) and len(out) < ranks:
                out.append(leaf[depth])
        depth += 1
    return tuple(out)


def place_jobs(placements: list[JobPlacement], ranks: list[int], topology: Topology, *,
               source: str | None = None) -> tuple[tuple[int, ...], ...]:
    """Host slots of every job (job ``j``'s rank ``i`` runs on slot ``result[j][i]``). InputError naming the
    job (``jobs[j].hosts`` / ``jobs[j].placement``) when slots run out or two jobs ask for one slot."""
    hosts = topology.rank_hosts()
    total = sum(ranks)
    if total > len(hosts):
        j = next(k for k in range(len(ranks)) if sum(ranks[:k + 1]) > len(hosts))
        raise InputError(f"the jobs have {total} ranks but topology {topology.name} has {len(hosts)} host slots "
                         f"(job {j} is the first that does not fit)", source=source, path=f"jobs[{j}].trace")
    host_slots: dict[str, list[int]] = {}
    for slot, host in enumerate(hosts):
        host_slots.setdefault(host, []).append(slot)
    owner: dict[int, int] = {}
    result: dict[int, tuple[int, ...]] = {}
    for j, placement in enumerate(placements):
        if not placement.hosts:
            continue
        if len(placement.hosts) != ranks[j]:
            raise InputError(f"lists {len(placement.hosts)} hosts for a trace of {ranks[j]} ranks",
                             source=source, path=f"jobs[{j}].hosts")
        used: dict[str, int] = {}
        chosen = []
        for k, host in enumerate(placement.hosts):
            slots = host_slots.get(host)
            if slots is None:
                raise InputError(f"topology {topology.name} has no host {host!r}", source=source,
                                 path=f"jobs[{j}].hosts[{k}]")
            n = used.get(host, 0)
            if n >= len(slots):
                raise InputError(f"host {host} has {len(slots)} slot(s), named more often", source=source,
                                 path=f"jobs[{j}].hosts[{k}]")
            used[host] = n + 1
            slot = slots[n]
            if slot in owner:
                raise InputError(f"host {host} (slot {slot}) is already job {owner[slot]}'s: two jobs on one "
                                 f"host slot", source=source, path=f"jobs[{j}].hosts[{k}]")
            owner[slot] = j
            chosen.append(slot)
        result[j] = tuple(chosen)
    for j, placement in enumerate(placements):
        if placement.hosts:
            continue
        assert placement.policy is not None
        free = [s for s in range(len(hosts)) if s not in owner]
        if ranks[j] > len(free):
            raise InputError(f"needs {ranks[j]} host slots, {len(free)} are left", source=source,
                             path=f"jobs[{j}].placement")
        chosen = policy_slots(placement.policy, placement.seed, ranks[j], free, topology)
        for slot in chosen:
            owner[slot] = j
        result[j] = chosen
    return tuple(result[j] for j in range(len(placements)))
