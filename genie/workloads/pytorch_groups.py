"""The process group of each c10d op of a PyTorch job (pure): what the trace says, else what the job's ranks
together imply (genie.workloads.group_inference).

An op's group is the one a ``record_param_comms`` child or a ``genie::pg=`` range names, else one of its
rank's groups narrowed by what the op says of its group's size (its *candidates*). gloo records the group
as an opaque object, so a rank on several groups leaves a collective with several candidates: those are
resolved across ranks (matching order, type and size on every member; deadlock freedom; the thread and the
Kineto times of the op's ``gloo:*`` work). A point-to-point op with several candidates is taken to be on the world,
``dist.send``'s default.
"""

from __future__ import annotations

from dataclasses import dataclass

from genie.core.errors import InputError
from genie.core.trace import ProcessGroup
from genie.workloads.group_inference import GroupOp, infer_groups
from genie.workloads.pytorch_et import P2P, CommOp


@dataclass(frozen=True)
class TimedOp:
    """A c10d op of one rank with its Kineto times (µs; None without a Kineto trace): issued at the op's
    start, done at its work event's end (else the op's own end)."""

    op: CommOp
    start_us: float | None = None
    end_us: float | None = None
    blocking: bool = True
    worker: int | None = None  # the thread its gloo: work ran on


def candidates(op: CommOp, rank: int, groups: tuple[ProcessGroup, ...]) -> list[ProcessGroup]:
    """The groups `op` of `rank` can be on (one when the trace names it)."""
    by_name = {g.name: g for g in groups}
    if op.group_hint in by_name:
        return [by_name[op.group_hint]]
    out = [g for g in groups if rank in g.ranks]
    if op.group_size is not None:
        out = [g for g in out if len(g.ranks) == op.group_size]
    return out


def _p2p_group(op: CommOp, cands: list[ProcessGroup], world: str | None) -> ProcessGroup | None:
    if len(cands) == 1:
        return cands[0]
    return next((g for g in cands if g.name == world), None)


def _group_op(t: TimedOp, rank: int, groups: tuple[ProcessGroup, ...], world: str | None) -> GroupOp | None:
    op = t.op
    cands = candidates(op, rank, groups)
    if isinstance(op.comm, P2P):
        group = _p2p_group(op, cands, world)
        local = op.peer_group_rank
        if group is None or local is None or not 0 <= local < len(group.ranks):
            return None  # the import names what is wrong with it
        return GroupOp(op.node.id, op.node.name, op.comm, (group.name,), peer=group.ranks[local],
                       is_send=op.comm is P2P.SEND, tag=op.tag, blocking=t.blocking)
    size = None if op.send_split_bytes is not None else op.size_bytes
    return GroupOp(op.node.id, op.node.name, op.comm, tuple(g.name for g in cands), size_bytes=size,
                   root=op.root_group_rank, blocking=t.blocking, start_us=t.start_us, end_us=t.end_us,
                   worker=t.worker)


GLOO_WORKERS = 2  # ProcessGroupGloo's default: 2 threads per device, one device


def _workers_per_group(seqs: list[list[GroupOp]]) -> int | None:
    """gloo's default worker count, unless an op known to be on its group shows more (None: not known)."""
    seen: dict[tuple[int, str], set] = {}
    for rank, seq in enumerate(seqs):
        for g in seq:
            if g.peer is None and len(g.candidates) == 1 and g.worker is not None:
                seen.setdefault((rank, g.candidates[0]), set()).add(g.worker)
    return None if any(len(w) > GLOO_WORKERS for w in seen.values()) else GLOO_WORKERS


def resolve_groups(per_rank: dict[int, tuple[TimedOp, ...]], groups: tuple[ProcessGroup, ...], world: str | None,
                   sources: dict[int, str]) -> dict[tuple[int, int], ProcessGroup]:
    """(rank, node id) -> group of every collective the trace leaves on several groups; empty when none is.
    InputError (naming the rank's file, the node and the candidate groups) when the job's ops allow more than
    one assignment, or none."""
    seqs: list[list[GroupOp]] = []
    ambiguous = False
    known = {g.name for g in groups}
    for rank in sorted(per_rank):
        seq = []
        for t in per_rank[rank]:
            if t.op.group_marker is not None and t.op.group_marker not in known:
                return {}  # refused by the import, naming the marker
            g = _group_op(t, rank, groups, world)
            if g is None:
                continue
            ambiguous = ambiguous or (g.peer is None and len(g.candidates) > 1)
            seq.append(g)
        seqs.append(seq)
    if not ambiguous:
        return {}
    members = {g.name: g.ranks for g in groups}
    # PyTorch names its groups by a counter (the default group "0", then each new_group in turn)
    creation = {g.name: int(g.name) for g in groups} if all(g.name.isdigit() for g in groups) else None
    result = infer_groups(seqs, members, creation, _workers_per_group(seqs))
    by_name = {g.name: g for g in groups}
    if result.ambiguity is not None:
        a = result.ambiguity
        count = str(a.surviving) if a.surviving >= 2 else "too many to search"
        names = ", ".join(repr(n) for n in a.candidates)
        raise InputError(f"node {a.node_id} ({a.name}): cannot tell its process group: the trace records it as "
                         f"an opaque object and {count} assignments of the job's ops to its groups fit every "
                         f"rank (same order, type and size on every member, no deadlock, Kineto times if any); "
                         f"it could be on groups {names}", source=sources.get(a.rank, f"rank {a.rank}"),
                         path=f"nodes[id={a.node_id}].inputs")
    if result.deadlock:
        rank, op = next((r, g) for r, seq in enumerate(seqs) for g in seq if g.peer is None and len(g.candidates) > 1)
        names = ", ".join(repr(n) for n in op.candidates)
        raise InputError(f"node {op.node_id} ({op.name}): cannot tell its process group: the trace records it as "
                         f"an opaque object and no assignment of the job's ops to its groups ({names} for this "
                         "one) gives every member of a group the same ops in the same order",
                         source=sources.get(rank, f"rank {rank}"), path=f"nodes[id={op.node_id}].inputs")
    return {key: by_name[name] for key, name in result.groups.items()}
