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

from collections import Counter
from collections.abc import Mapping
from functools import lru_cache

from genie.collectives.registry import build_schedule, choose_algorithm
from genie.core.alltoallv import SplitMatrix, matrix_op_size, rank_orders, split_matrices
from genie.core.collective import ROOTED, Algorithm, Collective
from genie.core.errors import InputError
from genie.core.program import Lane, ProgramNode, RankProgram
from genie.core.schedule import CollectiveOp, Recv, Schedule, Send, Step
from genie.core.sizes import trace_op_size
from genie.core.tcp_window import RENDEZVOUS_MIN_BYTES
from genie.core.trace import NodeKind, Trace, TraceNode


@lru_cache(maxsize=4096)
def cached_schedule(op: CollectiveOp) -> Schedule:
    return build_schedule(op)


# Clear to send: a rank sends a collective's data to a peer only once that peer has entered the op, as NCCL
# does (over InfiniBand/RoCE a send waits for the receiver's posted buffer; a proxy posts them when its rank
# launches the op). Over plain TCP a sender would otherwise push into the receiver's socket buffers before the
# receiver got there - as much as its receive window, which autotuning grows each time a backlog is read at
# once - taking a share of a link the receiver's other ops are using. Measured on star-8, 1 Gbit/s: a 2-rank
# 84 MiB all-reduce took 732 ms alone and 819 -> 1017 ms over 6 iterations when the partner of the receiver's
# next op entered it 130 ms early. Below RENDEZVOUS_MIN_BYTES per peer and op the data goes eagerly (as MPI's
# eager protocol): what fits a window anyway, and a small op does not pay the extra round trip
# (RENDEZVOUS_MIN_BYTES lives in genie.core.tcp_window: the fabric model reads it too).
CLEAR_TO_SEND_BYTES = 8


@lru_cache(maxsize=16384)
def clear_to_send(op: CollectiveOp, rank: int) -> Step | None:
    """The step `rank` runs before `op`'s own (None: none needed): a token to every peer that sends it at
    least RENDEZVOUS_MIN_BYTES in the op, and the token of every peer it sends that much to. Both ends of a
    pair count the same messages, so they agree on whether the pair has a token."""
    steps = cached_schedule(op).for_rank(rank).steps
    out: dict[int, int] = {}
    into: dict[int, int] = {}
    for step in steps:
        for s in step.sends:
            out[s.peer] = out.get(s.peer, 0) + s.size_bytes
        for r in step.recvs:
            into[r.peer] = into.get(r.peer, 0) + r.size_bytes
    tokens_out = tuple(Send(peer, 0, CLEAR_TO_SEND_BYTES) for peer, size in sorted(into.items())
                       if size >= RENDEZVOUS_MIN_BYTES)
    tokens_in = tuple(Recv(peer, 0, CLEAR_TO_SEND_BYTES) for peer, size in sorted(out.items())
                      if size >= RENDEZVOUS_MIN_BYTES)
    return Step(sends=tokens_out, recvs=tokens_in) if tokens_out or tokens_in else None


def collective_op(node: TraceNode, trace: Trace, rank: int, *, source: str,
                  split_bytes: SplitMatrix = (), hosts: Mapping[int, str] | None = None,
                  link_rate_bps: int | None = None) -> CollectiveOp:
    """The op of a collective node; ``split_bytes``: its instance's split matrix (an uneven all-to-all, from
    genie.core.alltoallv.split_matrices). AUTO chooses with the group's most ranks on one host (``hosts``:
    rank -> host; None: not known) and the hosts' ``link_rate_bps``."""
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
    if split_bytes:
        size, dtype = matrix_op_size(split_bytes)
    algorithm = node.algorithm or Algorithm.AUTO
    if algorithm is Algorithm.AUTO:
        per_node = None
        if hosts is not None and all(r in hosts for r in group.ranks):
            per_node = max(Counter(hosts[r] for r in group.ranks).values())
        algorithm = choose_algorithm(collective, size, n, ranks_per_node=per_node,
                                     net_GBps=link_rate_bps / 8e9 if link_rate_bps else None)
    root = node.attr_value("root") if collective in ROOTED else None  # a global rank (PyTorch import, PARAM)
    if root is None:
        root = group.ranks[0]
    elif not isinstance(root, int) or root not in group.ranks:
        raise InputError(f"{where}: root {root!r} is not a rank of its group {list(group.ranks)}", source=source)
    return CollectiveOp(collective=collective, size_bytes=size, group=tuple(group.ranks), algorithm=algorithm,
                        root=root, dtype_bytes=dtype, split_bytes=split_bytes)


def build_programs(trace: Trace, *, source: str = "<trace>", hosts: Mapping[int, str] | None = None,
                   link_rate_bps: int | None = None) -> list[RankProgram]:
    """One program per rank. The trace must already be valid (genie.workloads.analysis.check). ``hosts``
    (rank -> host) and ``link_rate_bps`` inform AUTO's choices (`collective_op`)."""
    channels, p2p_channel = trace.channels()
    orders = rank_orders(trace)
    splits = split_matrices(trace, orders)
    programs = []
    for index, rank_trace in enumerate(trace.ranks):
        rank = rank_trace.rank
        nodes: list[ProgramNode] = []
        links: set[tuple[int, int]] = set()
        for node in orders[index]:
            deps = node.deps
            if node.kind is NodeKind.COMPUTE:
                nodes.append(ProgramNode(node.id, node.name, Lane.COMPUTE, deps, duration_ns=max(0, node.duration_ns)))
            elif node.kind is NodeKind.COLLECTIVE:
                matrix = splits.get((index, node.id), ())
                op = collective_op(node, trace, rank, source=source, split_bytes=matrix, hosts=hosts,
                                   link_rate_bps=link_rate_bps)
                channel = channels[node.process_group or ""]
                if op.sends_messages and len(op.group) > 1:
                    links |= {(channel, peer) for peer in cached_schedule(op).peers_of(rank)}
                moved = sum(matrix[op.group.index(rank)]) if matrix else op.size_bytes  # all-to-allv: its input
                nodes.append(ProgramNode(node.id, node.name, Lane.COLLECTIVE, deps, op=op, channel=channel,
                                         size_bytes=moved, group=node.process_group or ""))
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
