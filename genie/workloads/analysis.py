"""Pure analysis of a Trace: validation, critical paths and summary statistics.

Collective instances are matched across ranks the way communicators match them: the k-th collective a rank
issues on a process group (in topological order, ties in file order) meets the k-th collective of every
other member. Point-to-point messages match per (source, destination, tag) in order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from enum import Enum

from genie.core.alltoallv import collective_sequences, split_problems
from genie.core.collective import ROOTED
from genie.core.errors import InputError
from genie.core.trace import CommType, CycleError, NodeKind, Trace, TraceNode, topological_order

_SIZE_MAY_DIFFER = frozenset({CommType.ALL_TO_ALL.value, CommType.GATHER.value, CommType.SCATTER.value})


class Severity(Enum):
    ERROR = "error"  # the trace cannot be replayed as it is
    WARNING = "warning"  # replayable; genie does what ASTRA-sim does and says so


class ProblemKind(Enum):
    RANK_NUMBERING = "rank_numbering"
    DUPLICATE_NODE_ID = "duplicate_node_id"
    DANGLING_DEPENDENCY = "dangling_dependency"  # tolerated: a format whose converter leaves them (Chakra ET)
    MISSING_DEPENDENCY = "missing_dependency"  # refused: in genie's own formats a missing node is a typo
    CYCLE = "cycle"
    UNKNOWN_COMM_TYPE = "unknown_comm_type"
    MISSING_SIZE = "missing_size"
    UNKNOWN_GROUP = "unknown_group"
    BAD_GROUP = "bad_group"
    NOT_IN_GROUP = "not_in_group"
    COLLECTIVE_MISMATCH = "collective_mismatch"
    BAD_PEER = "bad_peer"
    BAD_ROOT = "bad_root"
    P2P_MISMATCH = "p2p_mismatch"
    SPLIT_MISMATCH = "split_mismatch"  # an all-to-allv whose per-peer sizes are malformed or disagree pairwise
    COMM_AS_COMPUTE = "comm_as_compute"  # tolerated: communication written as compute (comm_ops_as_compute)

    @property
    def severity(self) -> Severity:
        # Chakra's converter removes node 0 but keeps `ctrl_deps: [0]` on each thread root; genie, like a
        # scheduler that waits only for nodes the file has, treats a dependency on a missing node as met.
        # ASTRA-sim itself (518bd51, feeder_v3) aborts on one ("Node 0 in ctrl_dep graph, but not found in
        # index"): the ASTRA-sim export drops them (drop_missing_deps).
        # Every other format (genie's own JSON/YAML, generated, PARAM, PyTorch, ASTRA-sim text) has no such
        # habit: there a dependency on a node that does not exist is a typo, refused (MISSING_DEPENDENCY).
        # A communication op written as a compute node (chakra_converter on a CPU capture) replays as the compute
        # it was recorded as: the trace runs, but without that op's traffic, which the user is told.
        tolerated = (ProblemKind.DANGLING_DEPENDENCY, ProblemKind.COMM_AS_COMPUTE)
        return Severity.WARNING if self in tolerated else Severity.ERROR


# the trace formats (Trace.info "format") whose converters leave dependencies on nodes they removed
TOLERATES_MISSING_DEPENDENCIES = frozenset({"chakra_et"})


def tolerates_missing_dependencies(trace: Trace) -> bool:
    return dict(trace.info).get("format") in TOLERATES_MISSING_DEPENDENCIES


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    message: str
    rank: int | None = None
    node_id: int | None = None

    @property
    def severity(self) -> Severity:
        return self.kind.severity

    def __str__(self) -> str:
        where = []
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.node_id is not None:
            where.append(f"node {self.node_id}")
        return f"{' '.join(where)}: {self.message}" if where else self.message


def _group_problems(trace: Trace) -> list[Problem]:
    problems, seen = [], set()
    for g in trace.groups:
        if g.name in seen or not g.name:
            problems.append(Problem(ProblemKind.BAD_GROUP, f"process group name {g.name!r} is empty or repeated"))
        seen.add(g.name)
        outside = [r for r in g.ranks if not 0 <= r < trace.num_ranks]
        if outside:
            problems.append(Problem(ProblemKind.BAD_GROUP, f"process group {g.name!r} names rank(s) {outside} "
                                    f"outside the world of {trace.num_ranks} ranks"))
        if len(set(g.ranks)) != len(g.ranks):
            problems.append(Problem(ProblemKind.BAD_GROUP, f"process group {g.name!r} repeats a rank"))
    return problems


def drop_missing_deps(trace: Trace) -> tuple[Trace, int]:
    """``trace`` without the dependencies on nodes its rank does not have (which genie counts as met), and how
    many were dropped; the trace itself when there are none."""
    ranks, dropped = [], 0
    for rank in trace.ranks:
        ids = {n.id for n in rank.nodes}
        nodes = []
        for n in rank.nodes:
            if all(d in ids for d in n.deps):
                nodes.append(n)
                continue
            data, ctrl = tuple(d for d in n.data_deps if d in ids), tuple(d for d in n.ctrl_deps if d in ids)
            dropped += len(n.data_deps) - len(data) + len(n.ctrl_deps) - len(ctrl)
            nodes.append(replace(n, data_deps=data, ctrl_deps=ctrl))
        ranks.append(replace(rank, nodes=tuple(nodes)))
    return (replace(trace, ranks=tuple(ranks)), dropped) if dropped else (trace, 0)


def _node_problems(trace: Trace, rank: int, nodes: tuple[TraceNode, ...]) -> list[Problem]:
    problems = []
    tolerated = tolerates_missing_dependencies(trace)
    ids = Counter(n.id for n in nodes)
    for node_id, count in ids.items():
        if count > 1:
            problems.append(Problem(ProblemKind.DUPLICATE_NODE_ID, f"id used by {count} nodes", rank, node_id))
    for n in nodes:
        for dep in n.deps:
            if dep not in ids and tolerated:
                problems.append(Problem(ProblemKind.DANGLING_DEPENDENCY, f"depends on missing node {dep} "
                                        "(ignored: treated as met)", rank, n.id))
            elif dep not in ids:
                problems.append(Problem(ProblemKind.MISSING_DEPENDENCY, f"depends on missing node {dep} "
                                        "(no node of rank {rank} has that id: a typo?)".replace("{rank}", str(rank)),
                                        rank, n.id))
        if n.kind is NodeKind.COLLECTIVE:
            if n.comm_type is None:
                code = n.comm_type_code
                problems.append(Problem(ProblemKind.UNKNOWN_COMM_TYPE, "collective without comm_type" if code is None
                                        else f"unknown comm_type {code}", rank, n.id))
            if n.size_bytes is None and n.comm_type is not CommType.BARRIER:
                problems.append(Problem(ProblemKind.MISSING_SIZE, "collective without comm_size", rank, n.id))
            group = trace.group(n.process_group)
            if group is None:
                problems.append(Problem(ProblemKind.UNKNOWN_GROUP, f"unknown process group {n.process_group!r}",
                                        rank, n.id))
            elif rank not in group.ranks:
                problems.append(Problem(ProblemKind.NOT_IN_GROUP, f"rank is not a member of process group "
                                        f"{n.process_group!r}", rank, n.id))
            root = n.attr_value("root")
            if group is not None and root is not None and n.comm_type is not None and \
                    n.comm_type.collective in ROOTED and root not in group.ranks:
                problems.append(Problem(ProblemKind.BAD_ROOT, f"root {root!r} is not a rank of its group "
                                        f"{list(group.ranks)}", rank, n.id))
        elif n.kind in (NodeKind.SEND, NodeKind.RECV):
            peer = n.peer
            if peer is None:
                field = "comm_dst" if n.kind is NodeKind.SEND else "comm_src"
                problems.append(Problem(ProblemKind.BAD_PEER, f"{n.kind.value} without {field} (and no c10d::send/"
                                        f"recv_ or record_param_comms caller naming the peer)", rank, n.id))
            elif not 0 <= peer < trace.num_ranks or peer == rank:
                problems.append(Problem(ProblemKind.BAD_PEER, f"{n.kind.value} peer {peer} is not another rank "
                                        f"of the world of {trace.num_ranks}", rank, n.id))
            if n.size_bytes is None:
                problems.append(Problem(ProblemKind.MISSING_SIZE, f"{n.kind.value} without comm_size", rank, n.id))
    return problems


def _describe(n: TraceNode) -> str:
    comm = n.comm_type
    name = comm.name.lower() if comm else f"comm_type {n.comm_type_code}"
    root = n.attr_value("root")
    return f"{name} of {n.size_bytes} B{'' if root is None else f' to/from root {root}'} ({n.name!r}, node {n.id})"


def _sequence_problems(trace: Trace, orders: dict[int, tuple[TraceNode, ...]]) -> list[Problem]:
    problems = []
    for group, sequences in _group_sequences(trace, orders).items():
        members = [r for r in (trace.group(group).ranks if trace.group(group) else ()) if r in orders]
        if not members:
            continue
        first = members[0]
        ref = sequences.get(first, [])
        label = repr(group) if group else "world"
        for r in members[1:]:
            seq = sequences.get(r, [])
            for k in range(max(len(ref), len(seq))):
                a = ref[k] if k < len(ref) else None
                b = seq[k] if k < len(seq) else None
                if a is None or b is None:
                    have, lack = (first, r) if b is None else (r, first)
                    extra = a or b
                    problems.append(Problem(ProblemKind.COLLECTIVE_MISMATCH, f"collective #{k} on group {label}: "
                                            f"rank {have} issues {_describe(extra)} but rank {lack} issues no more "
                                            f"collectives on it (deadlock)", have, extra.id))
                    break
                same_size = a.size_bytes == b.size_bytes or a.comm_type_code in _SIZE_MAY_DIFFER
                if a.comm_type_code != b.comm_type_code or not same_size or \
                        a.attr_value("root") != b.attr_value("root"):
                    problems.append(Problem(ProblemKind.COLLECTIVE_MISMATCH, f"collective #{k} on group {label}: "
                                            f"rank {first} issues {_describe(a)}, rank {r} issues {_describe(b)} "
                                            f"(deadlock)", r, b.id))
                    break
    return problems


def _group_sequences(trace: Trace, orders: dict[int, tuple[TraceNode, ...]]) -> dict[str, dict[int, list]]:
    """{group name ("" = world): {rank: [collective nodes in issue order]}} (genie.core.alltoallv's rule)."""
    return collective_sequences(orders)


def _p2p_channels(orders: dict[int, tuple[TraceNode, ...]]) -> dict[tuple, dict[NodeKind, list]]:
    """{(src, dst, tag): {SEND: [nodes on src], RECV: [nodes on dst]}} in issue order."""
    channels: dict[tuple, dict[NodeKind, list]] = defaultdict(lambda: {NodeKind.SEND: [], NodeKind.RECV: []})
    for rank, order in orders.items():
        for n in order:
            if n.kind is NodeKind.SEND and n.peer is not None:
                channels[(rank, n.peer, n.tag)][NodeKind.SEND].append((rank, n))
            elif n.kind is NodeKind.RECV and n.peer is not None:
                channels[(n.peer, rank, n.tag)][NodeKind.RECV].append((rank, n))
    return channels


def _p2p_problems(orders: dict[int, tuple[TraceNode, ...]]) -> list[Problem]:
    problems = []
    for (src, dst, tag), sides in sorted(_p2p_channels(orders).items()):
        sends, recvs = sides[NodeKind.SEND], sides[NodeKind.RECV]
        if len(sends) != len(recvs):
            rank, node = (sends or recvs)[0]
            problems.append(Problem(ProblemKind.P2P_MISMATCH, f"{len(sends)} send(s) from rank {src} to rank {dst} "
                                    f"with tag {tag} but {len(recvs)} receive(s) (deadlock)", rank, node.id))
            continue
        for (_, s), (_, r) in zip(sends, recvs):
            if s.size_bytes != r.size_bytes:
                problems.append(Problem(ProblemKind.P2P_MISMATCH, f"send of {s.size_bytes} B from rank {src} "
                                        f"(node {s.id}) meets a receive of {r.size_bytes} B", dst, r.id))
    return problems


def validate(trace: Trace) -> tuple[Problem, ...]:
    """Every problem found; an empty tuple means the trace can be replayed without a guaranteed deadlock."""
    problems = []
    numbers = [r.rank for r in trace.ranks]
    if numbers != list(range(len(numbers))):
        missing = sorted(set(range(max(numbers, default=-1) + 1)) - set(numbers))
        problems.append(Problem(ProblemKind.RANK_NUMBERING, f"ranks must be 0..N-1 in order; got {numbers[:16]}"
                                + (f", missing {missing[:16]}" if missing else "")))
    problems += _group_problems(trace)
    orders: dict[int, tuple[TraceNode, ...]] = {}
    for index, r in enumerate(trace.ranks):
        problems += _node_problems(trace, index, r.nodes)
        try:
            orders[index] = topological_order(r.nodes)
        except CycleError as exc:
            problems.append(Problem(ProblemKind.CYCLE, str(exc), index, exc.node_ids[0]))
    problems += _sequence_problems(trace, orders)
    problems += _p2p_problems(orders)
    problems += [Problem(ProblemKind.SPLIT_MISMATCH, p.message, p.rank, p.node_id)
                 for p in split_problems(trace, orders)]
    problems += [Problem(ProblemKind.COMM_AS_COMPUTE, f"{n.name} is a compute node: communication that "
                         "chakra_converter wrote as compute (it makes communication nodes only from GPU kernels), "
                         "timed as compute, its traffic not modelled; import the PyTorch traces themselves instead",
                         r.rank, n.id)
                 for r in trace.ranks for n in comm_as_compute(r.nodes)]
    return tuple(problems)


def errors(problems: tuple[Problem, ...]) -> tuple[Problem, ...]:
    """The problems that make a trace unreplayable (warnings left out)."""
    return tuple(p for p in problems if p.severity is Severity.ERROR)


def check(trace: Trace, *, source: str | None = None) -> tuple[str, ...]:
    """Raise InputError for the first error (noting how many more there are); else the warnings, one line
    each kind, for the command to print and record (e.g. the dependencies on missing nodes a Chakra
    converter left, which the replay treats as met)."""
    return checked_problems(validate(trace), source=source)


def checked_problems(problems: tuple[Problem, ...], *, source: str | None = None) -> tuple[str, ...]:
    """:func:`check` of the problems :func:`validate` found (where they were found apart: ``genie estimate``
    validates a big trace in a forked child beside the fabric model's compile)."""
    refused = errors(problems)
    if refused:
        more = f" (and {len(refused) - 1} more problem(s))" if len(refused) > 1 else ""
        raise InputError(f"{refused[0]}{more}", source=source)
    return warning_lines(problems, source=source)


def warning_lines(problems: tuple[Problem, ...], *, source: str | None = None) -> tuple[str, ...]:
    """One line per kind of warning: how many, and the first (``w: dangling_dependency: 8 warning(s), first:
    rank 0 node 5: depends on missing node 0 (ignored: treated as met)``)."""
    by_kind: dict[ProblemKind, list[Problem]] = defaultdict(list)
    for p in problems:
        if p.severity is Severity.WARNING:
            by_kind[p.kind].append(p)
    prefix = f"{source}: " if source else ""
    return tuple(f"{prefix}{kind.value}: {len(found)} warning(s), first: {found[0]}" for kind, found in by_kind.items())


# ---- critical paths ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CriticalPath:
    length_ns: int
    nodes: tuple[tuple[int, int], ...]  # (rank, node id) from first to last


def _weight(n: TraceNode) -> int:
    return n.duration_ns if n.kind is NodeKind.COMPUTE else 0


def rank_critical_path(nodes: tuple[TraceNode, ...], *, rank: int = 0) -> CriticalPath:
    """Longest chain of compute time through one rank's DAG (communication costs nothing)."""
    finish: dict[int, int] = {}
    best: dict[int, int | None] = {}
    for n in topological_order(nodes):
        pred = max((d for d in n.deps if d in finish), key=lambda d: finish[d], default=None)
        best[n.id] = pred
        finish[n.id] = (finish[pred] if pred is not None else 0) + _weight(n)
    if not finish:
        return CriticalPath(0, ())
    last = max(finish, key=lambda i: finish[i])
    path = []
    cur: int | None = last
    while cur is not None:
        path.append((rank, cur))
        cur = best[cur]
    return CriticalPath(finish[last], tuple(reversed(path)))


def critical_path(trace: Trace) -> CriticalPath:
    """Longest chain of compute time across ranks when communication costs nothing but still synchronizes:
    a collective ends when its last member is ready, a receive when its send is ready. Raises CycleError
    when ranks wait on each other in a cycle (a deadlock)."""
    orders = {i: topological_order(r.nodes) for i, r in enumerate(trace.ranks)}
    preds: dict[tuple, list[tuple]] = {}
    for rank, order in orders.items():
        for n in order:
            preds[(rank, n.id)] = [(rank, d) for d in n.deps]
    for group, sequences in _group_sequences(trace, orders).items():  # a virtual vertex per collective instance
        for rank, seq in sequences.items():
            for k, n in enumerate(seq):
                inst = ("collective", group, k)
                preds.setdefault(inst, []).extend(preds[(rank, n.id)])
                preds[(rank, n.id)] = [inst]
    for sides in _p2p_channels(orders).values():
        for (s_rank, s), (r_rank, r) in zip(sides[NodeKind.SEND], sides[NodeKind.RECV]):
            preds[(r_rank, r.id)].append((s_rank, s.id))
    weight = {(rank, n.id): _weight(n) for rank, order in orders.items() for n in order}
    finish: dict[tuple, int] = {}
    best: dict[tuple, tuple | None] = {}
    pending = {v: [p for p in ps if p in preds] for v, ps in preds.items()}
    children: dict[tuple, list[tuple]] = defaultdict(list)
    for v, ps in pending.items():
        for p in ps:
            children[p].append(v)
    waiting = {v: len(ps) for v, ps in pending.items()}
    ready = [v for v, w in waiting.items() if w == 0]
    while ready:
        v = ready.pop()
        pred = max(pending[v], key=lambda p: finish[p], default=None)
        best[v] = pred
        finish[v] = (finish[pred] if pred is not None else 0) + weight.get(v, 0)
        for c in children[v]:
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
    if len(finish) != len(preds):
        stuck = tuple(sorted(v[1] for v, w in waiting.items() if w > 0 and v[0] != "collective"))
        raise CycleError(stuck)
    real = [v for v in finish if v[0] != "collective"]
    if not real:
        return CriticalPath(0, ())
    cur: tuple | None = max(real, key=lambda v: (finish[v], -v[0]))
    length = finish[cur]
    path = []
    while cur is not None:
        if cur[0] != "collective":
            path.append(cur)
        cur = best[cur]
    return CriticalPath(length, tuple(reversed(path)))


# ---- communication recorded as compute (a CPU-captured PyTorch trace) -----------------------------------
_COMM_OP_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms")


def comm_as_compute(nodes: tuple[TraceNode, ...]) -> tuple[TraceNode, ...]:
    """One rank's COMPUTE nodes that are really communication: what Chakra's converter writes for a CPU (gloo)
    capture, where it makes COMM nodes only from GPU (NCCL) kernels. A GPU capture keeps the CPU ops that launched
    each kernel (``c10d::send`` -> ``record_param_comms`` -> the COMM node, each naming its caller in ctrl_deps):
    a c10d op's call tree that a COMM node depends on is its launch, not missing communication."""
    named = {n.id: n for n in nodes if n.kind is NodeKind.COMPUTE and n.name.startswith(_COMM_OP_PREFIXES)}

    def top(node: TraceNode) -> int:  # the outermost communication op of its call tree
        seen = {node.id}
        while (parent := next((named[d] for d in node.ctrl_deps if d in named and d not in seen), None)):
            node = parent
            seen.add(node.id)
        return node.id
    launched = {top(named[d]) for n in nodes if n.kind.is_comm for d in n.deps if d in named}
    return tuple(n for n in named.values() if top(n) not in launched)


def comm_ops_as_compute(trace: Trace) -> dict[str, int]:
    """{op name: nodes over all ranks} of the nodes :func:`comm_as_compute` finds."""
    return dict(Counter(n.name for r in trace.ranks for n in comm_as_compute(r.nodes)))


# ---- summary -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceSummary:
    num_ranks: int
    num_nodes: int
    nodes_by_kind: dict[str, int]
    count_by_collective: dict[str, int]  # collective type name (or "send_recv") -> nodes, all ranks
    bytes_by_collective: dict[str, int]  # comm_size summed over all ranks' nodes (sends only for send_recv)
    bytes_by_group: dict[str, int]  # "world" for collectives without pg_name; p2p not counted
    compute_total_ns: int  # all ranks
    compute_max_rank_ns: int  # the busiest rank
    critical_path_compute_ns: int  # longest per-rank compute chain
    critical_path_ns: int | None  # across ranks with zero-cost synchronizing comm; None if deadlocked


def summarize(trace: Trace) -> TraceSummary:
    kinds: Counter = Counter()
    count: Counter = Counter()
    by_coll: Counter = Counter()
    by_group: Counter = Counter()
    per_rank_compute = []
    for r in trace.ranks:
        compute = 0
        for n in r.nodes:
            kinds[n.kind.value] += 1
            if n.kind is NodeKind.COMPUTE:
                compute += n.duration_ns
            elif n.kind is NodeKind.COLLECTIVE:
                name = n.comm_type.name.lower() if n.comm_type else f"comm_type_{n.comm_type_code}"
                count[name] += 1
                by_coll[name] += n.size_bytes or 0
                by_group[n.process_group or "world"] += n.size_bytes or 0
            elif n.kind is NodeKind.SEND:
                count["send_recv"] += 1
                by_coll["send_recv"] += n.size_bytes or 0
        per_rank_compute.append(compute)
    try:
        per_rank = max((rank_critical_path(r.nodes, rank=i).length_ns for i, r in enumerate(trace.ranks)), default=0)
    except CycleError:
        per_rank = 0
    try:
        global_ns: int | None = critical_path(trace).length_ns
    except CycleError:
        global_ns = None
    return TraceSummary(trace.num_ranks, sum(kinds.values()), dict(kinds), dict(count), dict(by_coll),
                        dict(by_group), sum(per_rank_compute), max(per_rank_compute, default=0), per_rank, global_ns)
