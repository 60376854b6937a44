"""Trace → per-rank replay programs (pure): what each rank process walks during `genie replay`.

Each trace node becomes a `ProgramNode` on a *lane*: compute nodes share the rank's compute lane (one at a
time, like a GPU's compute stream); collectives run on the channel of their process group (one op at a time
per channel, in program order, like an NCCL communicator — different groups progress concurrently, each over
its own TCP connections); sends and receives run on a per-peer, per-direction lane in program order.
Communication overlaps compute. Collective sizes are converted from Chakra's `comm_size` (ASTRA-sim's
meaning) to genie's nccl-tests convention: all-gather's comm_size is the per-rank input, so the op moves
`comm_size x group size`; the others keep it.
"""

from __future__ import annotations

from functools import lru_cache

from genie.collectives.registry import build_schedule, choose_algorithm
from genie.core.collective import ROOTED, Algorithm, Collective
from genie.core.errors import InputError
from genie.core.program import Lane, ProgramNode, RankProgram
from genie.core.schedule import CollectiveOp, Schedule
from genie.core.sizes import trace_op_size
from genie.core.trace import NodeKind, Trace, TraceNode, topological_order


@lru_cache(maxsize=4096)
def cached_schedule(op: CollectiveOp) -> Schedule:
    return build_schedule(op)


def collective_op(node: TraceNode, trace: Trace, rank: int, *, source: str) -> CollectiveOp:
    ctype = node.comm_type
    collective = ctype.collective if ctype is not None else None
    where = f"rank {rank} node {node.id} ({node.name})"
    if collective is None or collective is Collective.SEND_RECV:
        kind = ctype.name if ctype is not None else node.comm_type_code
        names = ", ".join(c.value for c in Collective if c is not Collective.SEND_RECV)
        raise InputError(f"{where}: comm_type {kind} cannot be replayed (supported: {names})", source=source)
    group = trace.group(node.process_group)
    if group is None:
        raise InputError(f"{where}: unknown process group {node.process_group!r}", source=source)
    n = len(group.ranks)
    size, dtype = trace_op_size(collective, int(node.size_bytes or 0), n)
    algorithm = node.algorithm or Algorithm.AUTO
    if algorithm is Algorithm.AUTO:
        algorithm = choose_algorithm(collective, size, n)
    root = node.attr_value("root") if collective in ROOTED else None  # a global rank (PyTorch import, PARAM)
    if root is None:
        root = group.ranks[0]
    elif not isinstance(root, int) or root not in group.ranks:
        raise InputError(f"{where}: root {root!r} is not a rank of its group {list(group.ranks)}", source=source)
    return CollectiveOp(collective=collective, size_bytes=size, group=tuple(group.ranks), algorithm=algorithm,
                        root=root, dtype_bytes=dtype)


def build_programs(trace: Trace, *, source: str = "<trace>") -> list[RankProgram]:
    """One program per rank. The trace must already be valid (genie.workloads.analysis.check)."""
    channels, p2p_channel = trace.channels()
    programs = []
    for rank_trace in trace.ranks:
        rank = rank_trace.rank
        nodes: list[ProgramNode] = []
        links: set[tuple[int, int]] = set()
        for node in topological_order(rank_trace.nodes):
            deps = node.deps
            if node.kind is NodeKind.COMPUTE:
                nodes.append(ProgramNode(node.id, node.name, Lane.COMPUTE, deps, duration_ns=max(0, node.duration_ns)))
            elif node.kind is NodeKind.COLLECTIVE:
                op = collective_op(node, trace, rank, source=source)
                channel = channels[node.process_group or ""]
                if op.sends_messages and len(op.group) > 1:
                    links |= {(channel, peer) for peer in cached_schedule(op).peers_of(rank)}
                nodes.append(ProgramNode(node.id, node.name, Lane.COLLECTIVE, deps, op=op, channel=channel,
                                         size_bytes=op.size_bytes, group=node.process_group or ""))
            elif node.kind in (NodeKind.SEND, NodeKind.RECV):
                peer = node.peer
                if peer is None or peer == rank:
                    raise InputError(f"rank {rank} node {node.id} ({node.name}): bad peer {peer}", source=source)
                lane = Lane.SEND if node.kind is NodeKind.SEND else Lane.RECV
                links.add((p2p_channel, peer))
                nodes.append(ProgramNode(node.id, node.name, lane, deps, channel=p2p_channel, peer=peer,
                                         size_bytes=int(node.size_bytes or 0)))
            else:
                nodes.append(ProgramNode(node.id, node.name, Lane.NONE, deps))
        programs.append(RankProgram(rank, tuple(nodes), frozenset(links)))
    return programs
