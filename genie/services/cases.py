"""The case runner under every bench-like measurement (`genie bench`, `genie experiment`'s group sweeps,
`genie diagnose`, the `--time-dilation auto` probe): a list of `GroupCase`s, each a size measured on one or more
disjoint groups at once (each rank runs its own group's op; a rank in no group sits the case out), run in one
rank session. It sits below the services that stage a target (genie.services.stage), so that the host probe,
which a target's dilation may need, can use it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from genie.core.congestion import congestion_control_for
from genie.core.dilation import NO_DILATION, TimeDilation
from genie.core.errors import RunFailure
from genie.core.flowpath import FlowTuple
from genie.core.placement import RankPlacement
from genie.core.protocol import Barrier, BenchCase, BenchJob, CasePhase, CaseResult
from genie.core.schedule import CollectiveOp
from genie.engine.launch import Launcher
from genie.engine.session import FaultHooks, SessionFactory, SessionOptions, local_sessions
from genie.measure.metrics import CaseStats, case_stats, iteration_times_ns, rank_iteration_times_ns
from genie.measure.sched import CaseCpu, SchedCounters, case_cpu, parse_schedstat
from genie.services.dilation import emulated_results, real_timeout_s


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
    #: the in-place pass of each size, aligned with `stats` (empty when not run)
    in_place_stats: tuple[CaseStats, ...] = ()
    peak_rss_kb: dict[int, int] = field(default_factory=dict)  # rank -> its process's peak RSS (local ranks)
    flows: tuple[FlowTuple, ...] = ()  # every rank's sending connections (genie.core.flowpath)
    #: per case, each local rank's CPU time and runnable-but-waiting time (genie.measure.sched); empty when the
    #: ranks' processes cannot be read here
    cpu: tuple[CaseCpu, ...] = ()


def read_schedstat(pid: int) -> SchedCounters | None:
    """A process's ``/proc/<pid>/schedstat`` (None: gone, or a kernel without schedstats)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return parse_schedstat(f.read())
    except (OSError, ValueError):
        return None


class RankCpuReader:
    """Reads the rank processes' schedstat when every rank waits at a case's `TIMED` barrier (before its timed
    iterations) and at its `END` barrier (after them): the differences are the case's `CaseCpu`, over its timed
    iterations only - not the ranks' start-up, connection set-up, warmup or check iteration, which the times
    measured do not hold either. Only a PID list with one PID per placement, in placement order, as local
    sessions report it, is used: an MPI session's mpiexec or a partial list of local ranks would put figures
    on the wrong ranks (and an MPI session's barriers are MPI's own: it has no readings)."""

    def __init__(self, placements: Sequence[RankPlacement], *, read: Callable[[int], SchedCounters | None]
                 = read_schedstat, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.ranks = [p.rank for p in placements]
        self.read, self.clock = read, clock
        self.pids: dict[int, int] = {}
        self.cases: list[CaseCpu] = []
        self._timed: dict[int, tuple[int, dict[int, SchedCounters]]] = {}  # case -> reading at its TIMED barrier
        self._windows: dict[int, tuple[tuple[int, dict[int, SchedCounters]], ...]] = {}  # case -> (start, end)

    def started(self, pids: Sequence[int]) -> None:
        if len(pids) != len(self.ranks) or self.pids:
            return
        self.pids = dict(zip(self.ranks, pids))

    def barrier(self, barrier: Barrier) -> None:
        """Every rank waits at `barrier` (none runs the case's ops): a case's timed window opens or closes."""
        if not self.pids or barrier.case is None:
            return
        if barrier.phase is CasePhase.TIMED:
            self._timed[barrier.case] = self._reading()
        elif barrier.phase in (CasePhase.CHECK, CasePhase.END) and barrier.case in self._timed:  # the first
            self._windows[barrier.case] = (self._timed.pop(barrier.case), self._reading())

    def case_done(self, case: int, size_bytes: int) -> None:
        window = self._windows.pop(case, None)
        if window is None:
            return
        (t0, before), (t1, after) = window
        self.cases.append(case_cpu(case, size_bytes, t1 - t0, before, after))

    def _reading(self) -> tuple[int, dict[int, SchedCounters]]:
        counters = {rank: c for rank, pid in self.pids.items() if (c := self.read(pid)) is not None}
        return self.clock(), counters


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



def rank_job(cases: Sequence[GroupCase], rank: int, *, verify: bool = False, timeout_s: float = 60.0,
             record_steps: bool = False, fault_points: tuple[int, ...] = (), faults: bool = False) -> BenchJob:
    """What rank `rank` runs: each case's op of its own group."""
    return BenchJob(cases=tuple(BenchCase(c.op_for(rank), c.warmup, c.iterations) for c in cases), verify=verify,
                    timeout_s=timeout_s, record_steps=record_steps, fault_points=fault_points, faults=faults)



def run_cases(cases: Sequence[GroupCase], placements: list[RankPlacement], *, verify: bool = False,
              timeout_s: float = 60.0, record_steps: bool = False, spin_us: int = 0,
              socket_buffer_bytes: int | None = None, launcher: Launcher | None = None,
              on_pids: Callable[[list[int]], None] | None = None,
              progress: Callable[[int, int, CaseStats], None] | None = None,
              sessions: SessionFactory | None = None, fault_hooks: FaultHooks | None = None,
              fault_points: tuple[int, ...] = (), dilation: TimeDilation = NO_DILATION,
              cpu: RankCpuReader | None = None) -> BenchOutcome:
    """Run `cases` in one rank session; `sessions` chooses how ranks are started (default: local processes via
    `launcher`); `cpu` reads the ranks' CPU per case (default: a `RankCpuReader` of /proc). `fault_hooks`
    (genie.faults) inject faults live, pausing the ranks before the timed ops `fault_points`. A fault that ends
    the run inside a case keeps the iterations measured before it. Under `dilation` timeouts are N times longer
    and every time comes back in emulated time."""
    timeout_s = real_timeout_s(timeout_s, dilation)
    jobs = {p.rank: rank_job(cases, p.rank, verify=verify, timeout_s=timeout_s, record_steps=record_steps,
                             fault_points=tuple(fault_points), faults=fault_hooks is not None) for p in placements}
    stats: dict[int, CaseStats] = {}
    steps: dict[int, dict[int, list]] = {}

    cpu = cpu if cpu is not None else RankCpuReader(placements)

    def pids_known(pids: list[int]) -> None:
        cpu.started(pids)
        if on_pids:
            on_pids(pids)

    def on_case(index: int, per_rank: dict[int, CaseResult]) -> None:
        cpu.case_done(index, cases[index].op.size_bytes)
        per_rank = emulated_results(per_rank, dilation)
        op = cases[index].op
        restarts = next((m.restarts for m in per_rank.values() if m.restarts), ())
        per_rank_spans = {r: m.iterations for r, m in per_rank.items()}
        times = iteration_times_ns(per_rank_spans, restarts)
        stats[index] = case_stats(op.collective, op.algorithm, len(op.group), op.size_bytes, op.dtype_bytes, times,
                                  rank_iteration_times_ns(per_rank_spans, restarts))
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
                             socket_buffer_bytes=socket_buffer_bytes,
                             congestion=congestion_control_for(dilation.factor), on_pids=pids_known,
                             fault_hooks=partial, on_barrier=cpu.barrier)
    session = (sessions or local_sessions(launcher))(placements, options)
    try:
        result = session.run(lambda rank: jobs[rank], on_case=on_case)
    except RunFailure:
        # a fault ended the run inside a size: keep its iterations measured before its last fault point
        if partial is not None and partial.case is not None and partial.case not in stats and partial.reports:
            if all(m.iterations for m in partial.reports.values()):
                on_case(partial.case, {r: CaseResult(partial.case, r, iterations=m.iterations, restarts=m.restarts)
                                       for r, m in partial.reports.items()})  # converted there
        raise
    first = jobs[min(jobs)] if jobs else rank_job(cases, 0)
    return BenchOutcome(stats=tuple(stats[i] for i in sorted(stats)), job=first, placements=tuple(placements),
                        steps=steps, peak_rss_kb=dict(result.peak_rss_kb), flows=tuple(result.flows),
                        cpu=tuple(cpu.cases))


def run_cases_per_size(cases: list[GroupCase], plan: Any, dilator: Any, run: Callable[..., BenchOutcome],
                       on_case: Callable[[int, int, CaseStats], None], *, restore: bool = True) -> BenchOutcome:
    """`cases` in runs of consecutive sizes at one factor of `plan` (`genie.testbed.dilation_plan`): each run
    reshaped by `dilator` (`genie.services.dilation.SizeDilator`), then `run(part, dilation=, progress=)` (one
    rank session: `run_cases` with the caller's options); `on_case(done, total, stats)` over the whole list.
    The outcomes are joined as one sweep's; the testbed is put back at its own dilation at the end (not with
    `restore` False: the caller reshapes it next itself) and on any failure (a failure keeps what `on_case` was
    given, and stays the run's error: one of putting the links back is added to it as a note, never in its place,
    so a Ctrl-C stays an interruption)."""
    segments: list[tuple[Any, list[GroupCase]]] = []
    for case in cases:
        dilation = plan.dilation_for(case.op.size_bytes)
        if segments and segments[-1][0].factor == dilation.factor:
            segments[-1][1].append(case)
        else:
            segments.append((dilation, [case]))
    parts: list[BenchOutcome] = []
    offset = 0
    try:
        for dilation, part in segments:
            dilator.use(dilation, size_bytes=part[0].op.size_bytes)
            base = offset
            parts.append(run(part, dilation=dilation,
                             progress=lambda d, _t, stats, base=base: on_case(base + d, len(cases), stats)))
            offset += len(part)
    except BaseException as exc:
        try:
            dilator.restore()
        except RunFailure as failed:
            exc.add_note(str(failed))
        raise
    if restore:
        dilator.restore()
    return _joined(parts)


def _joined(parts: list[BenchOutcome]) -> BenchOutcome:
    """Several rank sessions' outcomes as one sweep's (cases, steps and flows in order; peak memory per rank)."""
    first, steps, offset, rss, cpu = parts[0], {}, 0, {}, []
    for part in parts:
        steps.update({offset + i: rows for i, rows in part.steps.items()})
        cpu.extend(replace(c, case=offset + c.case) for c in part.cpu)
        offset += len(part.job.cases)
        for rank, kb in part.peak_rss_kb.items():
            rss[rank] = max(kb, rss.get(rank, 0))
    flows = tuple(dict.fromkeys(flow for part in parts for flow in part.flows))
    job = replace(first.job, cases=tuple(c for part in parts for c in part.job.cases))
    return replace(first, stats=tuple(s for part in parts for s in part.stats), job=job, steps=steps,
                   peak_rss_kb=rss, flows=flows, cpu=tuple(cpu))
