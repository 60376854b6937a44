"""`genie bench` as a service — genie's nccl-tests: sweep collectives over sizes on the chosen target, with its
run directory, link observation, capture and live faults.

Every bench-like measurement runs through `run_cases`: a list of `GroupCase`s, each a size measured on one or
more disjoint groups at once (each rank runs its own group's op; a rank in no group sits the case out). A plain
sweep is one group of every rank; `genie experiment` measures the trace's own groups side by side; diagnose
measures host pairs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Optional, Sequence

from genie.collectives.registry import build_schedule, choose_algorithm
from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError, RunFailure
from genie.core.schedule import CollectiveOp
from genie.core.sizes import DEFAULT_DTYPE_BYTES, aligned_size
from genie.core.placement import RankPlacement
from genie.core.protocol import Barrier, BenchCase, BenchJob, CaseResult
from genie.engine.launch import Launcher
from genie.engine.session import FaultHooks, SessionFactory, SessionOptions, local_sessions
from genie.measure.metrics import CaseStats, case_stats, iteration_times_ns
from genie.services.options import RunOptions, check_counts, check_ranks, check_timeout

BenchProgress = Callable[[], ContextManager[Callable[[int, int, Any], None]]]


@dataclass(frozen=True)
class BenchRequest:
    """What to sweep: collectives x sizes from `min_bytes` to `max_bytes` (x `factor`), each `warmup` untimed and
    `iterations` timed iterations, on the first `ranks` ranks of the target (default: all)."""

    collectives: tuple[Collective, ...] = (Collective.ALL_REDUCE,)
    algorithm: Algorithm = Algorithm.AUTO
    min_bytes: int = 1024
    max_bytes: int = 1 << 20
    factor: int = 2
    iterations: int = 20
    warmup: int = 5
    ranks: int | None = None
    verify: bool = False
    timeout_s: float = 60.0
    record_steps: bool = False
    chunks: int = 1
    spin_us: int = 0
    socket_buffer_bytes: int | None = None


@dataclass(frozen=True)
class GroupCase:
    """One measured size: `ops` (one per disjoint group, the same collective, algorithm and size) run at once,
    `warmup` untimed then `iterations` timed iterations; an iteration ends with the slowest group."""

    ops: tuple[CollectiveOp, ...]
    warmup: int
    iterations: int

    @property
    def op(self) -> CollectiveOp:
        return self.ops[0]

    def op_for(self, rank: int) -> CollectiveOp:
        return next((op for op in self.ops if rank in op.group), self.ops[0])


@dataclass(frozen=True)
class BenchOutcome:
    stats: tuple[CaseStats, ...]
    job: BenchJob  # rank 0's job (every rank's is the same for a plain sweep)
    placements: tuple[RankPlacement, ...]
    steps: dict[int, dict[int, list]] = field(default_factory=dict)  # case -> rank -> step rows


@dataclass(frozen=True)
class BenchCommand:
    request: BenchRequest
    options: RunOptions


@dataclass(frozen=True)
class BenchResult:
    run_dir: Any  # pathlib.Path of the run directory
    status: Any  # genie.report.manifest.RunStatus
    duration_s: Optional[float]
    outcome: BenchOutcome
    doc: dict[str, Any]  # sweep.json's document
    links: Optional[dict[str, Any]]  # link/TCP counter summary (None for loopback)
    capture: Any  # genie.report.capture result, or None
    link_rate_bps: Optional[int]


class _PartialCase:
    """Forwards fault hooks, remembering what the ranks reported at the last fault point (the case it was in
    and each rank's timed iterations so far)."""

    def __init__(self, inner: FaultHooks) -> None:
        self.inner = inner
        self.case: int | None = None
        self.reports: dict[int, Barrier] = {}

    def timed_start(self, start_ns: int) -> None:
        self.inner.timed_start(start_ns)

    def fault_point(self, op_index: int, reports: dict[int, Barrier] | None = None) -> None:
        if reports:
            case = next(iter(reports.values())).case
            self.case = -1 if case is None else case
            self.reports = reports
        self.inner.fault_point(op_index, reports)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    if min_bytes <= 0:
        raise InputError("must be a positive size", path="min_bytes")
    if max_bytes < min_bytes:
        raise InputError(f"must be >= `min_bytes` ({min_bytes})", path="max_bytes")
    if factor < 2:
        raise InputError("must be an integer >= 2", path="factor")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def check_request(request: BenchRequest) -> None:
    """Everything about the sweep that does not depend on the target, before it is up."""
    check_counts(request.iterations, request.warmup)
    check_timeout(request.timeout_s)
    check_ranks(request.ranks)
    if not request.collectives:
        raise InputError("names no collective; expected at least one (such as all_reduce)", path="collectives")


def sweep_cases(request: BenchRequest, ranks: int) -> list[GroupCase]:
    """The plain sweep: every collective x size on one group of `ranks` ranks."""
    check_counts(request.iterations, request.warmup)
    group = tuple(range(ranks))
    cases = []
    for collective in request.collectives:
        for size in sweep_sizes(request.min_bytes, request.max_bytes, request.factor):
            size = aligned_size(collective, size, ranks)
            algorithm = request.algorithm
            if algorithm is Algorithm.AUTO:
                algorithm = choose_algorithm(collective, size, ranks)
            root, peer = (0, ranks - 1) if collective is Collective.SEND_RECV else (0, None)
            op = CollectiveOp(collective=collective, size_bytes=size, group=group, algorithm=algorithm,
                              root=root, peer=peer, chunks=request.chunks, dtype_bytes=DEFAULT_DTYPE_BYTES)
            check_schedule(op, field="algorithm")
            cases.append(GroupCase((op,), request.warmup, request.iterations))
    return cases


def check_schedule(op: CollectiveOp, *, field: str, what: str = "") -> None:
    """The op's schedule can be built (else an InputError naming `field`)."""
    try:
        build_schedule(op)
    except ValueError as exc:
        raise InputError(f"{what}{exc}", path=field) from None


def rank_job(cases: Sequence[GroupCase], rank: int, *, verify: bool = False, timeout_s: float = 60.0,
             record_steps: bool = False, fault_points: tuple[int, ...] = (), faults: bool = False) -> BenchJob:
    """What rank `rank` runs: each case's op of its own group."""
    return BenchJob(cases=tuple(BenchCase(c.op_for(rank), c.warmup, c.iterations) for c in cases), verify=verify,
                    timeout_s=timeout_s, record_steps=record_steps, fault_points=fault_points, faults=faults)


def build_job(request: BenchRequest, ranks: int) -> BenchJob:
    """The plain sweep's job (the same on every rank): validates the request."""
    return rank_job(sweep_cases(request, ranks), 0, verify=request.verify, timeout_s=request.timeout_s,
                    record_steps=request.record_steps)


def run_cases(cases: Sequence[GroupCase], placements: list[RankPlacement], *, verify: bool = False,
              timeout_s: float = 60.0, record_steps: bool = False, spin_us: int = 0,
              socket_buffer_bytes: int | None = None, launcher: Launcher | None = None,
              on_pids: Callable[[list[int]], None] | None = None,
              progress: Callable[[int, int, CaseStats], None] | None = None,
              sessions: SessionFactory | None = None, fault_hooks: FaultHooks | None = None,
              fault_points: tuple[int, ...] = ()) -> BenchOutcome:
    """Run `cases` in one rank session; `sessions` chooses how ranks are started (default: local processes via
    `launcher`). `fault_hooks` (genie.faults) inject faults live, pausing the ranks before the timed ops
    `fault_points`. A fault that ends the run inside a case keeps the iterations measured before it."""
    jobs = {p.rank: rank_job(cases, p.rank, verify=verify, timeout_s=timeout_s, record_steps=record_steps,
                             fault_points=tuple(fault_points), faults=fault_hooks is not None) for p in placements}
    stats: dict[int, CaseStats] = {}
    steps: dict[int, dict[int, list]] = {}

    def on_case(index: int, per_rank: dict[int, CaseResult]) -> None:
        op = cases[index].op
        restarts = next((m.restarts for m in per_rank.values() if m.restarts), ())
        times = iteration_times_ns({r: m.iterations for r, m in per_rank.items()}, restarts)
        stats[index] = case_stats(op.collective, op.algorithm, len(op.group), op.size_bytes, op.dtype_bytes, times)
        if record_steps:
            steps[index] = {r: list(m.steps) for r, m in per_rank.items()}
        if progress:
            progress(len(stats), len(cases), stats[index])

    # a case reports only when all its ops are done, each op bounded by the op timeout: the orchestrator's
    # no-progress backstop must outlast the longest legitimate case (a 64-rank 16 MiB sweep at 100 Mbit/s
    # is minutes), while a silent peer is still named by the op timeout itself
    longest_case = max((c.warmup + c.iterations for c in cases), default=1) + 1
    partial = _PartialCase(fault_hooks) if fault_hooks is not None else None
    options = SessionOptions(idle_timeout_s=max(120.0, timeout_s * longest_case), spin_s=spin_us / 1e6,
                             socket_buffer_bytes=socket_buffer_bytes, on_pids=on_pids, fault_hooks=partial)
    session = (sessions or local_sessions(launcher))(placements, options)
    try:
        session.run(lambda rank: jobs[rank], on_case=on_case)
    except RunFailure:
        # a fault ended the run inside a size: keep its iterations measured before its last fault point
        if partial is not None and partial.case is not None and partial.case not in stats and partial.reports:
            if all(m.iterations for m in partial.reports.values()):
                on_case(partial.case, {r: CaseResult(partial.case, r, iterations=m.iterations, restarts=m.restarts)
                                       for r, m in partial.reports.items()})
        raise
    first = jobs[min(jobs)] if jobs else rank_job(cases, 0)
    return BenchOutcome(stats=tuple(stats[i] for i in sorted(stats)), job=first, placements=tuple(placements),
                        steps=steps)


def run_bench(request: BenchRequest, placements: list[RankPlacement], **kwargs: Any) -> BenchOutcome:
    """The plain sweep of `request` on `placements` (keyword arguments as `run_cases`)."""
    return run_cases(sweep_cases(request, len(placements)), placements, verify=request.verify,
                     timeout_s=request.timeout_s, record_steps=request.record_steps, spin_us=request.spin_us,
                     socket_buffer_bytes=request.socket_buffer_bytes, **kwargs)


def run_bench_command(cmd: BenchCommand, progress: BenchProgress) -> BenchResult:
    """Validate everything first (InputError: nothing started), then run the sweep in a run directory.
    `progress()` is entered around the sweep and yields a callback(done, total, case stats)."""
    from genie.faults.service import bench_bounds
    from genie.report.sweep_recorder import SweepRecorder
    from genie.services.stage import staged

    request, opts = cmd.request, cmd.options
    check_request(request)  # what does not depend on the target, before it is up
    sweep_sizes(request.min_bytes, request.max_bytes, request.factor)
    config = {"min_bytes": request.min_bytes, "max_bytes": request.max_bytes, "step_factor": request.factor,
              "warmup_iters": request.warmup, "iterations": request.iterations, "verify": request.verify}
    params = {**config, "algorithm": request.algorithm.value, "chunks": request.chunks,
              "steps": request.record_steps}
    with staged("bench", opts, ranks=request.ranks, loopback_ranks=request.ranks, params=params,
                bounds=lambda n, _faults: bench_bounds(build_job(request, request.ranks or n))) as stage:
        target = stage.target
        meta = {"target": target.name, "ranks": len(stage.placements), "verify": request.verify,
                "iterations": request.iterations, "warmup": request.warmup}
        files = SweepRecorder(stage.run, meta)
        with stage.watching() as watch, progress() as bar:
            outcome = run_bench(request, stage.placements, on_pids=target.on_pids,
                                progress=lambda d, t, s: (bar(d, t, s), files.add(d, t, s)),
                                sessions=stage.sessions, fault_hooks=watch.injector,
                                fault_points=stage.fault_plan.fault_points())
        doc = files.finish(outcome, config=config, devices=target.devices(), steps=request.record_steps)
        stage.run.set_summary({"cases": len(outcome.stats), **stage.summary()})
    run = stage.run
    return BenchResult(run.run_dir, run.status, run.manifest.duration_s, outcome, doc, watch.links(),
                       watch.capture, (target.topology or {}).get("link_rate_bps"))
