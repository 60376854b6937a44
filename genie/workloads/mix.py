"""A placed job mix as ONE merged trace (pure): what the replay runs on one testbed and the fabric model plays.

Job ``j``'s rank ``r`` becomes the merged rank of its host slot; its process groups are renamed per job
(``<job>/<group>``) and its world becomes the group ``<job>``, so every job keeps its own communicators
(channels) and never waits for another's ranks; point-to-point peers are renumbered. Each merged rank's
program is the job's program repeated ``repetitions[j]`` times (each copy's first nodes wait for the previous
copy's last ones), after a compute node of the job's start offset: a job with shorter iterations keeps looping
until the longest has finished its own (:func:`repetition_counts`). :class:`genie.core.jobmix.MixMap` maps
every merged node back to its job, job rank, repetition and original node.
"""

from __future__ import annotations

import math
from dataclasses import replace

from genie.core.jobmix import MixMap, MixRank
from genie.core.trace import AttrType, NodeKind, ProcessGroup, RankTrace, Trace, TraceNode, compute_node

OFFSET_NODE_NAME = "job start offset"


def repetition_counts(alone_ns: list[float], offsets_ns: list[int], iterations: list[int]) -> tuple[int, ...]:
    """How often each job repeats its trace so that it runs until the longest job has timed its iterations:
    the longest (start offset + iterations x its iteration alone) repeats ``iterations`` times; every other job
    enough copies to cover that span from its own offset, plus one (it is slowed by the mix too), and at least
    its own ``iterations``."""
    spans = [o + n * t for o, n, t in zip(offsets_ns, iterations, alone_ns)]
    longest = max(range(len(spans)), key=lambda j: spans[j]) if spans else 0
    out = []
    for j, (o, n, t) in enumerate(zip(offsets_ns, iterations, alone_ns)):
        if j == longest or t <= 0:
            out.append(n)
        else:
            out.append(max(n, math.ceil((spans[longest] - o) / t) + 1))
    return tuple(out)


def _sinks(nodes: tuple[TraceNode, ...]) -> tuple[int, ...]:
    needed = {d for n in nodes for d in n.deps}
    return tuple(n.id for n in nodes if n.id not in needed)


def _job_rank_nodes(trace: Trace, job_rank: int, name: str, rank_of: dict[int, int], repetitions: int,
                    offset_ns: int) -> tuple[list[TraceNode], int]:
    nodes = trace.ranks[job_rank].nodes
    stride = max((n.id for n in nodes), default=0) + 1
    ids = {n.id for n in nodes}
    sinks = _sinks(nodes)
    out = [compute_node(0, OFFSET_NODE_NAME, duration_ns=offset_ns)]
    for k in range(repetitions):
        base = 1 + k * stride
        previous = tuple(1 + (k - 1) * stride + s for s in sinks) if k else (0,)
        for n in nodes:
            data = tuple(base + d for d in n.data_deps if d in ids)
            ctrl = tuple(base + d for d in n.ctrl_deps if d in ids)
            if not data and not ctrl:
                ctrl = previous
            out.append(_renamed(replace(n, id=base + n.id, data_deps=data, ctrl_deps=ctrl), name, rank_of))
    return out, stride


def _renamed(node: TraceNode, job: str, rank_of: dict[int, int]) -> TraceNode:
    """The node with its group named per job and its peers renumbered to merged ranks."""
    if node.kind is NodeKind.COLLECTIVE:
        group = node.process_group
        node = node.with_attr("pg_name", f"{job}/{group}" if group else job, AttrType.STRING)
    elif node.kind in (NodeKind.SEND, NodeKind.RECV):
        for key in ("comm_src", "comm_dst"):
            v = node.attr_value(key)
            if isinstance(v, int) and not isinstance(v, bool) and v in rank_of:
                node = node.with_attr(key, rank_of[v])
        if node.process_group:
            node = node.with_attr("pg_name", f"{job}/{node.process_group}", AttrType.STRING)
    return node


def merge_jobs(traces: list[Trace], names: list[str], slots: list[tuple[int, ...]], repetitions: list[int],
               offsets_ns: list[int], *, world: int | None = None) -> tuple[Trace, MixMap]:
    """The merged trace of placed jobs and its map. ``slots[j][r]``: the host slot of job ``j``'s rank ``r``.
    Merged ranks are the used slots in slot order, or with ``world`` every slot ``0..world-1`` (unused ones
    idle: no nodes) - the fabric model plays a trace of the topology's whole world."""
    used = sorted(s for job in slots for s in job)
    order = list(range(world)) if world is not None else used
    merged_rank = {slot: i for i, slot in enumerate(order)}
    rank_nodes: list[list[TraceNode]] = [[] for _ in order]
    mix_ranks: list[MixRank] = [MixRank(-1, -1, 1, 0) for _ in order]
    groups: list[ProcessGroup] = []
    for j, trace in enumerate(traces):
        rank_of = {r: merged_rank[slots[j][r]] for r in range(trace.num_ranks)}
        groups.append(ProcessGroup(names[j], tuple(rank_of[r] for r in range(trace.num_ranks))))
        groups.extend(ProcessGroup(f"{names[j]}/{g.name}", tuple(rank_of[r] for r in g.ranks)) for g in trace.groups)
        for r in range(trace.num_ranks):
            nodes, stride = _job_rank_nodes(trace, r, names[j], rank_of, repetitions[j], offsets_ns[j])
            rank_nodes[rank_of[r]] = nodes
            mix_ranks[rank_of[r]] = MixRank(j, r, stride, repetitions[j])
    merged = Trace(tuple(RankTrace(i, tuple(nodes)) for i, nodes in enumerate(rank_nodes)), tuple(groups),
                   (("workload", "job mix: " + ", ".join(names)),))
    return merged, MixMap(tuple(mix_ranks), tuple(order), tuple(repetitions), tuple(int(o) for o in offsets_ns))
