"""Uneven all-to-all (all-to-allv, MoE token routing): the one rule for what rank i sends rank j (pure).

An all-to-all node may record its per-peer sizes (``send_split_bytes``: bytes to each member of its group, in
group-rank order, its own entry what it keeps; ``recv_split_bytes``: bytes from each member). An all-to-all
*instance* is the k-th collective every member of a group issues (in topological order, ties in file order:
how communicators match them, genie.workloads.analysis). Its **split matrix** ``m[i][j]`` is what group
position ``i`` sends position ``j``: row ``i`` is position ``i``'s ``send_split_bytes`` when it records them,
else the even split of its ``comm_size`` (``trace_op_size``'s aligned size / group size, as an even all-to-all
moves it; members of different sizes without splits each split their own). What position ``j`` receives from ``i`` is ``m[i][j]``; a recorded ``recv_split_bytes`` must say the
same (`split_problems`). An instance whose matrix equals the even one has none: existing traces are unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from genie.core.collective import Collective
from genie.core.sizes import dtype_bytes_for, trace_op_size
from genie.core.trace import (RECV_SPLITS_ATTR, SEND_SPLITS_ATTR, CommType, NodeKind, Trace, TraceNode,
                              topological_order)

SplitMatrix = tuple[tuple[int, ...], ...]


def even_send_row(comm_size_bytes: int, group_size: int) -> tuple[int, ...]:
    """What a member of an even all-to-all of ``comm_size_bytes`` sends each member (nccl-tests rounding)."""
    size, _ = trace_op_size(Collective.ALL_TO_ALL, comm_size_bytes, group_size)
    return (size // group_size,) * group_size


def send_row(node: TraceNode, group_size: int) -> tuple[int, ...]:
    """Bytes ``node``'s rank sends each member: its recorded splits (when one per member), else the even split."""
    splits = node.send_split_bytes
    if splits is not None and len(splits) == group_size:
        return splits
    return even_send_row(int(node.size_bytes or 0), group_size)


def has_splits(node: TraceNode) -> bool:
    """Does the node record per-peer sizes (well formed or not)?"""
    return node.attr(SEND_SPLITS_ATTR) is not None or node.attr(RECV_SPLITS_ATTR) is not None


def rank_orders(trace: Trace) -> dict[int, tuple[TraceNode, ...]]:
    """Each rank's nodes in topological order (raises CycleError)."""
    return {i: topological_order(r.nodes) for i, r in enumerate(trace.ranks)}


def collective_sequences(orders: dict[int, tuple[TraceNode, ...]]) -> dict[str, dict[int, list[TraceNode]]]:
    """{group name ("" = world): {rank: [collective nodes in issue order]}}: the k-th entries meet."""
    sequences: dict[str, dict[int, list[TraceNode]]] = defaultdict(lambda: defaultdict(list))
    for rank, order in orders.items():
        for n in order:
            if n.kind is NodeKind.COLLECTIVE:
                sequences[n.process_group or ""][rank].append(n)
    return sequences


@dataclass(frozen=True)
class AllToAllInstance:
    """One all-to-all instance with per-peer sizes: its group (global ranks) and each member's node."""

    group: str
    ranks: tuple[int, ...]
    nodes: tuple[TraceNode, ...]  # nodes[i]: the node of ranks[i]

    @property
    def matrix(self) -> SplitMatrix:
        n = len(self.ranks)
        return tuple(send_row(node, n) for node in self.nodes)

    @property
    def is_plain(self) -> bool:
        """Does every member send the same even split (a plain all-to-all, whatever its attributes say)?"""
        n = len(self.ranks)
        matrix = self.matrix
        return len(set(matrix)) == 1 and matrix[0] == even_send_row(int(self.nodes[0].size_bytes or 0), n)


def uneven_instances(trace: Trace, orders: dict[int, tuple[TraceNode, ...]]) -> tuple[AllToAllInstance, ...]:
    """Every all-to-all instance where some member records per-peer sizes or the members' sizes differ (each
    then sends its even split: DLRM's embedding exchange with tables of different sizes); an instance whose
    members do not all issue an all-to-all there is left to the sequence check."""
    out = []
    for name, sequences in collective_sequences(orders).items():
        group = trace.group(name)
        if group is None or not all(r in sequences for r in group.ranks):
            continue
        for k in range(min(len(sequences[r]) for r in group.ranks)):
            nodes = tuple(sequences[r][k] for r in group.ranks)
            if all(n.comm_type is CommType.ALL_TO_ALL for n in nodes) and \
                    (any(has_splits(n) for n in nodes) or len({n.size_bytes for n in nodes}) > 1):
                out.append(AllToAllInstance(name, tuple(group.ranks), nodes))
    return tuple(out)


def split_matrices(trace: Trace, orders: dict[int, tuple[TraceNode, ...]] | None = None
                   ) -> dict[tuple[int, int], SplitMatrix]:
    """{(rank, node id): split matrix} of every member node of an uneven all-to-all instance (an instance whose
    members all send the same even split is left out: it is a plain all-to-all)."""
    out: dict[tuple[int, int], SplitMatrix] = {}
    for inst in uneven_instances(trace, orders if orders is not None else rank_orders(trace)):
        if inst.is_plain:
            continue
        matrix = inst.matrix
        for rank, node in zip(inst.ranks, inst.nodes):
            out[(rank, node.id)] = matrix
    return out


def matrix_op_size(matrix: SplitMatrix) -> tuple[int, int]:
    """(buffer bytes, element size) of an all-to-allv: the largest input or output of a member, and the largest
    element (float32 or byte) every split is a whole number of."""
    sizes = [b for row in matrix for b in row]
    dtype = dtype_bytes_for(0)
    if any(b % dtype for b in sizes):
        dtype = 1
    n = len(matrix)
    largest = max([sum(row) for row in matrix] + [sum(matrix[i][j] for i in range(n)) for j in range(n)], default=0)
    return largest, dtype


@dataclass(frozen=True)
class SplitProblem:
    rank: int
    node_id: int
    message: str


def _node_split_problems(rank: int, node: TraceNode, n: int) -> list[SplitProblem]:
    out = []
    for name, splits in ((SEND_SPLITS_ATTR, node.send_split_bytes), (RECV_SPLITS_ATTR, node.recv_split_bytes)):
        if node.attr(name) is None:
            continue
        if splits is None or len(splits) != n:
            out.append(SplitProblem(rank, node.id, f"{name} must list the non-negative bytes of each of the "
                                                   f"{n} members of its group, got {node.attr_value(name)!r}"))
    send = node.send_split_bytes
    if send is not None and len(send) == n and sum(send) != int(node.size_bytes or 0):
        out.append(SplitProblem(rank, node.id, f"{SEND_SPLITS_ATTR} add up to {sum(send)} B but comm_size is "
                                               f"{node.size_bytes} B"))
    return out


def split_problems(trace: Trace, orders: dict[int, tuple[TraceNode, ...]]) -> list[SplitProblem]:
    """Malformed splits, and the pairs that disagree: what rank i sends rank j (its send_split_bytes, else the
    even split) must be what rank j receives from rank i (its recv_split_bytes, when recorded)."""
    out: list[SplitProblem] = []
    for rank, order in orders.items():
        for node in order:
            if node.kind is NodeKind.COLLECTIVE and has_splits(node):
                group = trace.group(node.process_group)
                if node.comm_type is not CommType.ALL_TO_ALL:
                    out.append(SplitProblem(rank, node.id, "per-peer split sizes on a collective that is not an "
                                                           "all-to-all"))
                elif group is not None:
                    out += _node_split_problems(rank, node, len(group.ranks))
    if out:
        return out
    for inst in uneven_instances(trace, orders):
        matrix = inst.matrix
        for j, (rank, node) in enumerate(zip(inst.ranks, inst.nodes)):
            recv = node.recv_split_bytes
            if recv is None:
                continue
            for i, got in enumerate(recv):
                if got != matrix[i][j]:
                    sender = inst.ranks[i]
                    out.append(SplitProblem(rank, node.id, f"all-to-all ({node.name!r}) receives {got} B from rank "
                                                           f"{sender}, which sends it {matrix[i][j]} B (node "
                                                           f"{inst.nodes[i].id}) (deadlock)"))
                    break
    return out


def busiest_even_size(matrix: SplitMatrix) -> int:
    """The size of the even all-to-all whose every pair carries what the busiest member sends to or receives
    from another member on average: ``n x ceil(max over members of max(sent to others, received from others)
    / (n - 1))``. What a model that knows one size per op (ASTRA-sim's all-to-all, a measurement of even
    all-to-alls) can be given for an uneven one: the busiest member's time, an upper bound for the others."""
    n = len(matrix)
    if n < 2:
        return sum(map(sum, matrix))
    busiest = max(max(sum(matrix[i]) - matrix[i][i], sum(matrix[k][i] for k in range(n)) - matrix[i][i])
                  for i in range(n))
    return n * -(-busiest // (n - 1))


def as_even_all_to_alls(trace: Trace) -> tuple[Trace, tuple[tuple[int, int, int], ...]]:
    """``trace`` with every uneven all-to-all instance made the even all-to-all of `busiest_even_size` (every
    member's ``comm_size``; the split attributes dropped), and per instance changed (its first member's rank,
    that rank's node id, the size written)."""
    orders = rank_orders(trace)
    changed: dict[tuple[int, int], int] = {}
    written = []
    for inst in uneven_instances(trace, orders):
        if inst.is_plain:
            continue
        size = busiest_even_size(inst.matrix)
        written.append((inst.ranks[0], inst.nodes[0].id, size))
        for rank, node in zip(inst.ranks, inst.nodes):
            changed[(rank, node.id)] = size
    if not changed:
        return trace, ()
    ranks = []
    for i, r in enumerate(trace.ranks):
        nodes = []
        for node in r.nodes:
            size = changed.get((i, node.id))
            if size is not None:
                node = node.with_attr("comm_size", size)
                node = replace(node, attrs=tuple(a for a in node.attrs
                                                 if a.name not in (SEND_SPLITS_ATTR, RECV_SPLITS_ATTR)))
            nodes.append(node)
        ranks.append(replace(r, nodes=tuple(nodes)))
    return replace(trace, ranks=tuple(ranks)), tuple(written)
