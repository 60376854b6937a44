"""PyTorch execution traces (+ Kineto traces) of a job's ranks -> a genie Trace (pure).

Per rank:
- **communication**: every c10d op (genie.workloads.pytorch_et.C10D_OPS) becomes a collective, send or recv
  node, named and numbered as in the execution trace, with ``comm_size`` in ASTRA-sim's meaning, a ``dtype``
  attribute, the process group (``pg_name``; none for the world) and, for p2p, the global peer and the tag.
  The group comes from a ``record_param_comms`` child when the trace has one (NCCL), else from the only group
  the op can be on (this rank's groups, narrowed by what the op says of its group's size); a collective that
  could be on several of this rank's groups (gloo records the group as an opaque object) is resolved across
  the ranks (genie.workloads.pytorch_groups). A point-to-point op that could be on several groups is taken to
  be on the world (``dist.send``'s default).
  An op inside a ``genie::pg=<name>`` range whose group no process-group record of the trace describes
  (tracing began before ``new_group``) is refused, not put on the world.
- **compute**: the top-level ops of the traced step (the children of ``ProfilerStep#N``; without one, of each
  thread root) on the threads they ran on, each lasting its Kineto duration minus the time its nested c10d
  ops took on that thread (the communication taken out). When the Kineto trace has GPU kernels, compute is
  the kernels instead, each stream a chain, and a c10d op's timing is its NCCL kernel's (the k-th NCCL kernel
  to start belongs to the k-th c10d op; a count that differs is refused); its issuer is the last kernel to
  start before it.
- **dependencies** follow the job's timeline: each thread's compute is a chain; a communication op depends on
  the compute op that issued it; the first compute op of each thread that began after the communication
  ended (its ``gloo:``/``nccl:`` work event; a synchronous op without one: its own end) depends on it. So the
  job's overlap is kept: DDP's bucket all-reduces run alongside the rest of backward and the optimizer waits.
  Without a Kineto trace there are no durations (compute is 0) and a synchronous op blocks the next compute op
  while an asynchronous one only ends the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from genie.core.errors import InputError
from genie.core.intervals import union_ns
from genie.core.trace import (Attribute, AttrType, ProcessGroup, Trace, TraceNode, collective_node, compute_node,
                              make_trace, recv_node, send_node)
from genie.workloads.pg_metadata import PG_INIT_NODE, merge_groups
from genie.workloads.pytorch_groups import TimedOp, candidates, resolve_groups
from genie.workloads.pytorch_et import (C10D_OPS, DEFAULT_GROUP_NAME, P2P, PG_HINT, PROCESS_ROOT, PROFILER_STEP,
                                        RECORD_PARAM_COMMS, THREAD_ROOT, WAIT_HINT, WORK_PREFIXES, CommOp, HostNode,
                                        HostTrace, KinetoEvent, KinetoTrace, comm_ops)

_META = (PG_INIT_NODE, THREAD_ROOT, PROCESS_ROOT)


@dataclass(frozen=True)
class RankInput:
    rank: int
    host: HostTrace
    kineto: KinetoTrace | None = None


@dataclass(frozen=True)
class RankReport:
    rank: int
    step_ns: int | None  # ProfilerStep's Kineto duration (None: no Kineto trace or no step)
    compute_ns: int  # gap_compute_ns included
    comm_ops: int
    gap_compute_ns: int = 0  # time between ops on the step's thread counted as compute (Python)
    gap_wait_ns: int = 0  # time between ops taken as waiting for communication work (not compute)


@dataclass(frozen=True)
class ImportResult:
    trace: Trace
    ranks: tuple[RankReport, ...]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class _Segment:
    node: HostNode
    lane: object  # the thread it ran on
    start_us: float
    duration_ns: int
    end_us: float = 0.0


def _world(groups: tuple[ProcessGroup, ...], world_size: int) -> str | None:
    full = [g.name for g in groups if g.ranks == tuple(range(world_size))]
    return full[0] if full else None


def _group_of(op: CommOp, rank: int, groups: tuple[ProcessGroup, ...], world: str | None, source: str,
              warnings: list[str], resolved: dict[tuple[int, int], ProcessGroup]) -> ProcessGroup | None:
    """The op's group (None: the world, when the trace names no groups)."""
    by_name = {g.name: g for g in groups}
    if op.group_marker is not None and op.group_marker not in by_name \
            and (groups or op.group_marker != DEFAULT_GROUP_NAME):
        raise InputError(f"node {op.node.id} ({op.node.name}) ran inside {PG_HINT}{op.group_marker} but the trace "
                         f"records no process group {op.group_marker!r} (no '{PG_INIT_NODE}' record of it: tracing "
                         "began before the group was made); capture it again after a warmup step", source=source,
                         path=f"nodes[id={op.node.parent}].name")
    if not groups:
        return None
    if (rank, op.node.id) in resolved:
        return resolved[(rank, op.node.id)]
    cands = candidates(op, rank, groups)
    if len(cands) == 1:
        return cands[0]
    names = ", ".join(repr(g.name) for g in cands) or "none"
    if isinstance(op.comm, P2P) and world in {g.name for g in cands}:
        warnings.append(f"{source}: node {op.node.id} ({op.node.name}) could be on groups {names}; taken to be "
                        f"on the world, dist.{op.comm.value}'s default")
        return next(g for g in cands if g.name == world)
    raise InputError(f"node {op.node.id} ({op.node.name}): cannot tell its process group: the trace records it "
                     f"as an opaque object and this rank is on groups {names}", source=source,
                     path=f"nodes[id={op.node.id}].inputs")


def _check_belongs(host: HostTrace, kineto: KinetoTrace, rank: int) -> dict[int, KinetoEvent]:
    """rf_id -> Kineto event; InputError when the Kineto trace is not the execution trace's companion."""
    if kineto.rank is not None and kineto.rank != rank:
        raise InputError(f"Kineto trace of rank {kineto.rank} paired with the execution trace of rank {rank} "
                         f"({host.source})", source=kineto.source, path="distributedInfo.rank")
    if kineto.pid is not None and host.pid is not None and kineto.pid != host.pid:
        raise InputError(f"does not belong to {host.source}: its process is {kineto.pid}, the execution trace's "
                         f"{host.pid}", source=kineto.source, path="traceEvents[].pid")
    by_rf = {e.rf_id: e for e in kineto.events if e.rf_id is not None and e.category != "kernel"}
    for n in host.nodes:
        if n.name in C10D_OPS and n.rf_id in by_rf and by_rf[n.rf_id].name != n.name:
            raise InputError(f"does not belong to {host.source}: record function {n.rf_id} is {n.name!r} there "
                             f"but {by_rf[n.rf_id].name!r} here", source=kineto.source,
                             path="traceEvents[].args.Record function id")
    return by_rf


# gloo runs reduce_scatter_tensor (``_reduce_scatter_base_``) as an all-reduce: its work is ``gloo:all_reduce``
_WORK_ALIASES = {"reducescatter": ("allreduce",)}


def _work_name(op: CommOp) -> str:
    return op.comm.value if isinstance(op.comm, P2P) else op.comm.name.lower()


def _match_work(ops: tuple[CommOp, ...], host_children: dict[int, list[HostNode]], by_rf: dict[int, KinetoEvent],
                kineto: KinetoTrace) -> dict[int, KinetoEvent]:
    """Each c10d op's gloo:/nccl: work event (an execution-trace child, else the first unclaimed Kineto work event
    of its kind that began after the op), by op node id; an op without one (synchronous) is absent."""
    unclaimed = sorted((e for e in kineto.events if e.name.startswith(WORK_PREFIXES) and e.category != "kernel"),
                       key=lambda e: e.start_us)
    out: dict[int, KinetoEvent] = {}
    for op in ops:
        issued = by_rf.get(op.node.rf_id) if op.node.rf_id is not None else None
        if issued is None:
            continue
        for child in host_children.get(op.node.id, ()):
            if child.name.startswith(WORK_PREFIXES) and child.rf_id in by_rf:
                out[op.node.id] = by_rf[child.rf_id]
                break
        else:
            kind = _work_name(op).replace("_", "")
            for name in (kind, *_WORK_ALIASES.get(kind, ())):
                ev = next((ev for ev in unclaimed if ev.start_us >= issued.start_us
                           and ev.name.split(":", 1)[1].replace("_", "") == name), None)
                if ev is not None:
                    out[op.node.id] = ev
                    break
        if op.node.id in out and out[op.node.id] in unclaimed:
            unclaimed.remove(out[op.node.id])
    return out


def _is_async(op: CommOp) -> bool:
    return any(isinstance(v, bool) and v for v in op.node.values)


def _is_comm_event(e: KinetoEvent) -> bool:
    """Time a thread spent in communication: a c10d op, the backend's work (gloo:/nccl:), or a range genie's
    capture put around a torch.distributed call (``genie::pg=``, includes a synchronous call's wait) or around
    ``Work.wait`` (``genie::wait``)."""
    return (e.name in C10D_OPS or e.name == RECORD_PARAM_COMMS
            or e.name.startswith((PG_HINT, WAIT_HINT, *WORK_PREFIXES)))


def _is_compute_event(e: KinetoEvent) -> bool:
    return e.category in ("cpu_op", "user_annotation") and not PROFILER_STEP.match(e.name) and not _is_comm_event(e)


def _covered_us(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    return union_ns((max(a, lo), min(b, hi)) for a, b in spans if a < hi and b > lo)


def _gaps(tops: list[KinetoEvent], window: tuple[float, float], hidden_work: list[tuple[float, float]]
          ) -> list[tuple[int, float, float]]:
    """The gaps between the outermost events of the step's thread inside the step: (index of the top event
    after the gap, or len(tops) at the end; compute µs; waiting µs). Time between ops (Python) is compute, but
    a gap while communication work whose wait no range records (`hidden_work`: DDP's reducer waits in C++) is
    in flight is waiting, to its end: the thread resumes when the work is done, which the backend may record
    later than that (its work range ends after the waiter has resumed, by ms on a loaded host), and a woken
    thread may wait for a core before it runs."""
    out, prev = [], window[0]
    for i, e in enumerate([*tops, None]):
        start = window[1] if e is None else min(e.start_us, window[1])
        if start > prev:
            waiting = any(a < start and b > prev for a, b in hidden_work)
            out.append((i, 0.0 if waiting else start - prev, start - prev if waiting else 0.0))
        if e is not None:
            prev = max(prev, e.end_us)
    return out


def _segments(host: HostTrace, children: dict[int, list[HostNode]], kineto: KinetoTrace | None,
              by_rf: dict[int, KinetoEvent] | None, hidden_work: list[tuple[float, float]]
              ) -> tuple[list[_Segment], int | None, tuple[int, int]]:
    """The compute ops: with Kineto, each thread's outermost events (an event inside another one's interval on
    its thread is part of it; the execution trace's call tree is not used, it nests ops under ones that had
    ended) that are not communication, each lasting its duration minus the communication inside it; the gaps
    between ops on the step's thread are compute too (see :func:`_gaps`), added to the compute op before the
    gap (after a communication op or at the step's start: to the next one). Without Kineto: the children of
    the step (or thread root) in the execution trace, lasting 0. Returns the segments, the step's duration and
    (gap time counted as compute, gap time taken as waiting) in ns."""
    steps = [n for n in host.nodes if PROFILER_STEP.match(n.name)]
    if kineto is None or by_rf is None:
        parents = steps or [n for n in host.nodes if n.name == THREAD_ROOT]
        out = [_Segment(n, n.tid, float(n.id), 0) for parent in parents for n in children.get(parent.id, ())
               if n.name not in _META and not PROFILER_STEP.match(n.name) and n.name not in C10D_OPS]
        return sorted(out, key=lambda seg: seg.node.id), None, (0, 0)
    step_events = [e for e in kineto.events if PROFILER_STEP.match(e.name)]
    step_ns = sum(round(e.dur_us * 1000) for e in step_events) or None
    node_of = {n.rf_id: n for n in host.nodes if n.rf_id is not None}
    next_id = max((n.id for n in host.nodes), default=0) + 1
    out: list[_Segment] = []
    gap_compute = gap_wait = 0.0
    by_thread: dict[object, list[KinetoEvent]] = {}
    for e in kineto.events:
        if e.category in ("cpu_op", "user_annotation") and not PROFILER_STEP.match(e.name):
            by_thread.setdefault(e.tid, []).append(e)
    # the step's range closes in the optimizer's post-hook: what runs after it (the profiler's own teardown
    # inside Optimizer.step's range) is not the step's
    clip = (step_events[0].start_us, step_events[0].end_us) if len(step_events) == 1 else None
    for tid, events in by_thread.items():
        events.sort(key=lambda e: (e.start_us, -e.dur_us))
        comm = [(e.start_us, e.end_us) for e in events if _is_comm_event(e)]
        tops: list[KinetoEvent] = []
        for e in events:
            if not tops or e.start_us >= tops[-1].end_us:  # else nested in the current outermost event
                tops.append(e)
        extra_us = [0.0] * len(tops)
        if clip is not None and step_events[0].tid == tid:
            for i, compute_us, wait_us in _gaps(tops, clip, hidden_work):
                gap_compute, gap_wait = gap_compute + compute_us, gap_wait + wait_us
                before = i - 1 if i > 0 and not _is_comm_event(tops[i - 1]) else None
                after = next((j for j in range(i, len(tops)) if not _is_comm_event(tops[j])), None)
                target = before if before is not None else after
                if target is None:  # after the last compute op: the last one takes it
                    target = next((j for j in reversed(range(i)) if not _is_comm_event(tops[j])), None)
                if target is not None:
                    extra_us[target] += compute_us
        for e, extra in zip(tops, extra_us):
            if _is_comm_event(e):
                continue
            node = node_of.get(e.rf_id)
            if node is None:
                node = HostNode(next_id, e.name, -1, e.rf_id, 0, (), ())
                next_id += 1
            lo, hi = (max(e.start_us, clip[0]), min(e.end_us, clip[1])) if clip else (e.start_us, e.end_us)
            busy_us = max(0.0, hi - lo - _covered_us(comm, lo, hi)) + extra
            out.append(_Segment(node, tid, e.start_us, max(0, round(busy_us * 1000)), e.end_us))
    out.sort(key=lambda seg: (seg.start_us, seg.node.id))
    return out, step_ns, (round(gap_compute * 1000), round(gap_wait * 1000))


def _issuer(op: CommOp, host: HostTrace, segments: list[_Segment], issued: KinetoEvent | None) -> _Segment | None:
    """The compute op that issued `op`: the outermost event containing it on its thread (Kineto), else its
    ancestor among the compute ops, else the last compute op to start before it."""
    if issued is not None:
        same = [s for s in segments if s.lane == issued.tid and s.start_us <= issued.start_us]
        return same[-1] if same else None
    parent_of = {n.id: n.parent for n in host.nodes}
    by_node = {s.node.id: s for s in segments}
    cur, seen = op.node.parent, set()
    while cur in parent_of and cur not in seen:
        if cur in by_node:
            return by_node[cur]
        seen.add(cur)
        cur = parent_of[cur]
    before = [s for s in segments if s.node.id < op.node.id]
    return before[-1] if before else None


def _gpu_kernels(host: HostTrace, kineto: KinetoTrace, ops: tuple[CommOp, ...]
                 ) -> tuple[list[_Segment], dict[int, KinetoEvent]] | None:
    """With GPU kernels in the Kineto trace: the compute kernels as segments (lane: their stream) and each c10d
    op's NCCL kernel (the k-th NCCL kernel to start is the k-th c10d op's); None without kernels."""
    kernels = sorted((e for e in kineto.events if e.category == "kernel"), key=lambda e: (e.start_us, e.name))
    if not kernels:
        return None
    nccl = [k for k in kernels if "nccl" in k.name.lower()]
    if len(nccl) != len(ops):
        raise InputError(f"{len(ops)} c10d op(s) in {host.source} but {len(nccl)} NCCL kernel(s) here: cannot "
                         "pair them", source=kineto.source, path="traceEvents[cat=kernel]")
    next_id = max((n.id for n in host.nodes), default=0) + 1
    segments = []
    for i, k in enumerate(kk for kk in kernels if "nccl" not in kk.name.lower()):
        lane = ("stream", k.stream if k.stream is not None else k.tid)
        segments.append(_Segment(HostNode(next_id + i, k.name, -1, None, 0, (), ()), lane, k.start_us,
                                 round(k.dur_us * 1000), k.end_us))
    return segments, {op.node.id: k for op, k in zip(ops, nccl)}


def _comm_node(op: CommOp, rank: int, group: ProcessGroup | None, world: str | None, deps: tuple[int, ...],
               source: str, world_size: int) -> TraceNode:
    pg = None if group is None or group.name == world else group.name
    extra = (Attribute("dtype", AttrType.STRING, op.dtype),) if op.dtype else ()
    if isinstance(op.comm, P2P):
        members = group.ranks if group is not None else None
        local = op.peer_group_rank
        if local is None:
            raise InputError(f"node {op.node.id} ({op.node.name}): no peer rank (any-source receive)",
                             source=source, path=f"nodes[id={op.node.id}].inputs")
        if members is not None and not 0 <= local < len(members):
            raise InputError(f"node {op.node.id} ({op.node.name}): peer {local} is outside its group of "
                             f"{len(members)}", source=source, path=f"nodes[id={op.node.id}].inputs")
        peer = members[local] if members is not None else local
        build = send_node if op.comm is P2P.SEND else recv_node
        return build(op.node.id, op.node.name, rank=rank, peer=peer, size_bytes=op.size_bytes, tag=op.tag,
                     process_group=pg, data_deps=deps, extra_attrs=extra)
    if op.root_group_rank is not None:  # genie's `root` attribute: a global rank
        local = op.root_group_rank
        if not 0 <= local < (len(group.ranks) if group is not None else world_size):
            raise InputError(f"node {op.node.id} ({op.node.name}): root {local} is outside its group",
                             source=source, path=f"nodes[id={op.node.id}].inputs")
        extra += (Attribute("root", AttrType.INT64, group.ranks[local] if group is not None else local),)
    return collective_node(op.node.id, op.node.name, comm_type=op.comm, size_bytes=op.size_bytes,
                           process_group=pg, data_deps=deps, extra_attrs=extra, send_split_bytes=op.send_split_bytes,
                           recv_split_bytes=op.recv_split_bytes)


def _timed_ops(inp: RankInput) -> tuple[TimedOp, ...]:
    """The rank's c10d ops with their Kineto times (issue: the op's start; done: its work's end)."""
    ops = comm_ops(inp.host)
    if inp.kineto is None:
        return tuple(TimedOp(op, blocking=not _is_async(op)) for op in ops)
    by_rf = _check_belongs(inp.host, inp.kineto, inp.rank)
    works = _match_work(ops, inp.host.children(), by_rf, inp.kineto)
    out = []
    for op in ops:
        issued = by_rf.get(op.node.rf_id) if op.node.rf_id is not None else None
        work = works.get(op.node.id)  # without it the op's end is not the collective's
        timed = issued is not None and work is not None
        gloo = timed and work.name.startswith("gloo:") and isinstance(work.tid, int)
        out.append(TimedOp(op, issued.start_us if timed else None, work.end_us if timed else None,
                           not _is_async(op), work.tid if gloo else None))
    return tuple(out)


def _rank_nodes(inp: RankInput, groups: tuple[ProcessGroup, ...], world: str | None, world_size: int,
                warnings: list[str], resolved: dict[tuple[int, int], ProcessGroup]
                ) -> tuple[list[TraceNode], RankReport]:
    host, rank = inp.host, inp.rank
    children = host.children()
    by_rf = _check_belongs(host, inp.kineto, rank) if inp.kineto is not None else None
    ops = comm_ops(host)
    works = _match_work(ops, children, by_rf, inp.kineto) if by_rf is not None and inp.kineto is not None else {}
    parents = {n.id: n for n in host.nodes}
    # work issued from C++ (no genie::pg range around its op: DDP's reducer, or a trace genie did not capture)
    # may be waited for in no profiled range; Python's waits are genie::pg / genie::wait ranges
    hidden = [(w.start_us, w.end_us) for op in ops if (w := works.get(op.node.id)) is not None
              and not (op.node.parent in parents and parents[op.node.parent].name.startswith(PG_HINT))]
    segments, step_ns, (gap_ns, wait_ns) = _segments(host, children, inp.kineto, by_rf, hidden)
    gpu = _gpu_kernels(host, inp.kineto, ops) if inp.kineto is not None else None
    if gpu is not None:
        segments, nccl = gpu
        gap_ns = wait_ns = 0
    lanes: dict[object, list[_Segment]] = {}
    for s in segments:
        lanes.setdefault(s.lane, []).append(s)
    deps: dict[int, list[int]] = {s.node.id: [] for s in segments}
    for lane in lanes.values():
        for a, b in zip(lane, lane[1:]):
            deps[b.node.id].append(a.node.id)
    comm_nodes: list[tuple[float, TraceNode]] = []
    for op in ops:
        group = _group_of(op, rank, groups, world, host.source, warnings, resolved)
        if gpu is not None:
            kernel = nccl[op.node.id]
            start, end = kernel.start_us, kernel.end_us
            before = [seg for seg in segments if seg.start_us <= kernel.start_us]
            issuer = before[-1] if before else None
            waiters = [after[0] for lane in lanes.values()
                       if (after := [seg for seg in lane if seg.start_us >= end])]
        elif by_rf is not None and op.node.rf_id in by_rf:
            issued = by_rf[op.node.rf_id]
            work = works.get(op.node.id)
            start, end = issued.start_us, work.end_us if work is not None else issued.end_us
            issuer = _issuer(op, host, segments, issued)
            waiters = []
            for lane in lanes.values():
                after = [s for s in lane if s.start_us >= end and (issuer is None or s.start_us > issuer.start_us)]
                if after:
                    waiters.append(after[0])
        else:
            start = float(op.node.id)
            issuer = _issuer(op, host, segments, None)
            nxt = [s for s in segments if s.node.id > op.node.id and (issuer is None or s.lane == issuer.lane)]
            waiters = nxt[:1] if nxt and not _is_async(op) else []
        node = _comm_node(op, rank, group, world, (issuer.node.id,) if issuer else (), host.source, world_size)
        comm_nodes.append((start, node))
        for w in waiters:
            deps[w.node.id].append(op.node.id)
    nodes = [(s.start_us, compute_node(s.node.id, s.node.name, duration_ns=s.duration_ns,
                                       data_deps=tuple(deps[s.node.id]))) for s in segments]
    nodes += comm_nodes
    nodes.sort(key=lambda t: (t[0], t[1].id))
    compute_ns = sum(s.duration_ns for s in segments)
    if inp.kineto is None and host.linked:
        warnings.append(f"{host.source}: chakra_trace_link's output, whose merged Kineto times genie does not read: "
                        "compute durations are 0 (import the execution trace and the Kineto trace it was linked from)")
    elif inp.kineto is None:
        warnings.append(f"{host.source}: no Kineto trace beside it: compute durations are 0")
    return [n for _, n in nodes], RankReport(rank, step_ns, compute_ns, len(ops), gap_ns, wait_ns)


def build_trace(inputs: list[RankInput] | tuple[RankInput, ...]) -> ImportResult:
    """The genie Trace of ranks 0..N-1 (``inputs`` in any order; every rank exactly once)."""
    ordered = sorted(inputs, key=lambda i: i.rank)
    numbers = [i.rank for i in ordered]
    if numbers != list(range(len(numbers))):
        raise InputError(f"execution traces of ranks {numbers}: need ranks 0..{len(numbers) - 1}, each once",
                         source=ordered[0].host.source if ordered else None)
    groups = merge_groups({i.rank: i.host.groups for i in ordered}, sources={i.rank: i.host.source for i in ordered})
    world = _world(groups, len(ordered))
    warnings: list[str] = []
    resolved = resolve_groups({i.rank: _timed_ops(i) for i in ordered}, groups, world,
                              {i.rank: i.host.source for i in ordered}) if groups else {}
    rank_nodes, reports = [], []
    for inp in ordered:
        nodes, report = _rank_nodes(inp, groups, world, len(ordered), warnings, resolved)
        rank_nodes.append(nodes)
        reports.append(report)
    kept = tuple(g for g in groups if g.name != world)
    trace = make_trace(rank_nodes, groups=kept, info=(("format", "pytorch_et"),))
    return ImportResult(trace, tuple(reports), tuple(warnings))


