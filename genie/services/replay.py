"""`genie replay` as a service: a whole trace on the chosen target — compute waited out, communication sent for
real — with its run directory, link observation, capture and live faults."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Optional

from genie.core.congestion import congestion_control_for
from genie.core.dilation import NO_DILATION, DilationMode, TimeDilation
from genie.core.errors import InputError
from genie.core.trace import Trace
from genie.core.placement import RankPlacement
from genie.core.protocol import CaseResult, ReplayJob, Straggler
from genie.core.records import IterationRecords, RankRecords, ReplayOutcome
from genie.services.dilation import (emulated_results, real_program, real_stragglers, real_timeout_s,
                                     replay_iteration)
from genie.services.options import RunOptions, check_counts, check_timeout

if TYPE_CHECKING:  # the engine and numpy load when a replay runs, not for a refusal (issue #35 item 7)
    from genie.engine.launch import Launcher
    from genie.engine.session import FaultHooks, SessionFactory

ReplayProgress = Callable[[], ContextManager[Callable[[int, int], None]]]


@dataclass(frozen=True)
class ReplayRequest:
    iterations: int = 1
    warmup: int = 0
    timeout_s: float = 60.0
    spin_us: int = 200


@dataclass(frozen=True)
class ReplayCommand:
    trace: Path
    request: ReplayRequest
    options: RunOptions
    npus: Optional[int] = None  # ranks of an ASTRA-sim text workload


@dataclass(frozen=True)
class ReplayResult:
    run_dir: Path
    status: Any  # genie.report.manifest.RunStatus
    outcome: ReplayOutcome
    doc: dict[str, Any]  # replay.json's document
    links: Optional[dict[str, Any]]
    capture: Any  # genie.report.capture result, or None
    warnings: tuple[str, ...] = ()  # the trace's (e.g. dependencies on missing nodes treated as met); in the manifest
    dilation: TimeDilation = NO_DILATION  # the run's (one clock for the whole trace)


def check_request(request: ReplayRequest) -> None:
    check_counts(request.iterations, request.warmup)
    check_timeout(request.timeout_s)


def check_fits(trace: Trace, placements: list[RankPlacement], *, source: str) -> list[RankPlacement]:
    """The first `trace.num_ranks` placements; an error naming the first rank the testbed lacks."""
    if trace.num_ranks > len(placements):
        missing = len(placements)
        users = [g.name for g in trace.groups if any(r >= len(placements) for r in g.ranks)]
        where = f" (used by group {users[0]!r})" if users else ""
        raise InputError(f"the trace has {trace.num_ranks} ranks but the testbed only {len(placements)}: "
                         f"rank {missing}{where} has no host", source=source)
    return placements[:trace.num_ranks]


def run_replay(trace: Trace, placements: list[RankPlacement], request: ReplayRequest = ReplayRequest(), *,
               source: str = "<trace>", launcher: Launcher | None = None,
               on_pids: Callable[[list[int]], None] | None = None,
               progress: Callable[[int, int], None] | None = None,
               sessions: SessionFactory | None = None, fault_hooks: FaultHooks | None = None,
               fault_points: tuple[int, ...] = (),
               stragglers: dict[int, tuple[Straggler, ...]] | None = None,
               on_iteration: Callable[[ReplayOutcome], None] | None = None,
               dilation: TimeDilation = NO_DILATION, auto_by_placement: bool = False,
               link_rate_bps: int | None = None) -> ReplayOutcome:
    """Replay `trace` on `placements`. With `auto_by_placement`, AUTO chooses with the placements' hosts (PAT
    needs one rank per host, as NCCL's) and `link_rate_bps` (the testbed's host link rate); else as a bench
    sweep that does not know the hosts would (`genie experiment` keeps its sweep and replay alike). `fault_hooks` (genie.faults) inject faults live, before the timed
    iterations `fault_points`; `stragglers` per rank stretch that rank's compute (see `genie.engine.rank`);
    `on_iteration` gets the outcome so far after each timed iteration (so that a run that fails or is
    interrupted later keeps the iterations it finished). Under `dilation` the ranks run compute N times longer
    and their records come back in emulated time (`genie.services.dilation`)."""
    from genie.engine.program import build_programs
    from genie.engine.session import SessionOptions, local_sessions

    check_request(request)
    placements = check_fits(trace, placements, source=source)
    programs = build_programs(trace, source=source, link_rate_bps=link_rate_bps,
                              hosts={p.rank: p.host for p in placements} if auto_by_placement else None)
    by_rank = {p.rank: p for p in programs}
    common = dict(iterations=request.iterations, warmup=request.warmup,
                  timeout_s=real_timeout_s(request.timeout_s, dilation), spin_ns=request.spin_us * 1000)
    if fault_hooks is not None:
        common.update(faults=True, fault_points=tuple(fault_points))
    stragglers = stragglers or {}
    results: dict[int, IterationRecords] = {}

    def on_case(index: int, per_rank: dict[int, CaseResult]) -> None:
        per_rank = emulated_results(per_rank, dilation)
        results[index] = IterationRecords(index, tuple(
            RankRecords(rank, m.t0_ns, tuple(m.records)) for rank, m in sorted(per_rank.items())))
        if on_iteration is not None:
            on_iteration(ReplayOutcome(tuple(programs), tuple(results[i] for i in sorted(results)),
                                       tuple(placements)))
        if progress:
            progress(len(results), request.iterations)

    options = SessionOptions(idle_timeout_s=max(120.0, common["timeout_s"] * 2), on_pids=on_pids,
                             fault_hooks=fault_hooks, congestion=congestion_control_for(dilation.factor))
    session = (sessions or local_sessions(launcher))(placements, options)
    result = session.run(lambda rank: ReplayJob(program=real_program(by_rank[rank], dilation),
                                                stragglers=real_stragglers(tuple(stragglers.get(rank, ())),
                                                                           dilation),
                                                **common), on_case=on_case)
    return ReplayOutcome(tuple(programs), tuple(results[i] for i in sorted(results)), tuple(placements),
                         tuple(sorted(result.peak_rss_kb.items())), tuple(result.flows))


def load_checked_trace(path: Path, npus: int | None) -> tuple[Trace, tuple[str, ...]]:
    """The trace at `path`, checked (InputError naming the file otherwise), and its warnings to print and record."""
    from genie.workloads.analysis import check
    from genie.workloads.loader import load_trace

    loaded = load_trace(path, npus=npus)
    return loaded, check(loaded, source=str(path))


def run_replay_command(cmd: ReplayCommand, progress: ReplayProgress) -> ReplayResult:
    """Load and check the trace, validate the target, launch and faults (InputError: nothing started), then
    replay it in a run directory. `progress()` is entered around the replay and yields a callback(done, total)."""
    opts, request, trace = cmd.options, cmd.request, cmd.trace
    check_request(request)
    loaded, warnings = load_checked_trace(trace, cmd.npus)  # a bad trace is refused before the engine loads

    from genie.engine.program import build_programs
    from genie.faults import service as faults_service
    from genie.measure.metrics import rank_memory_summary
    from genie.report.manifest import input_digest
    from genie.report.replay import replay_files
    from genie.services.connection_paths import PathRecorder
    from genie.services.stage import staged

    ranks = loaded.num_ranks
    programs = functools.cache(lambda: build_programs(loaded, source=str(trace)))

    def bounds(_ranks: int, faults: list) -> Any:
        return faults_service.replay_bounds(programs() if faults else (), request.iterations, request.warmup,
                                            request.timeout_s, faults)

    params = {"iterations": request.iterations, "warmup": request.warmup, "npus": cmd.npus, "ranks": ranks}
    # auto weighs the host's per-step costs against the whole iteration: one clock for the whole trace
    iteration = replay_iteration(programs()) if opts.time_dilation.mode is DilationMode.AUTO else None
    with staged("replay", opts, ranks=None, loopback_ranks=ranks, params=params, bounds=bounds,
                iteration=iteration,
                inputs=(input_digest(trace, "trace"),),
                fits=lambda placements: check_fits(loaded, placements, source=str(trace))) as stage:
        for warning in warnings:
            stage.run.warn(warning)
        meta = {"trace": str(trace), "target": stage.target.name, "ranks": ranks,
                "iterations": request.iterations, "warmup": request.warmup}

        def keep(so_far: ReplayOutcome) -> None:  # each finished iteration is on disk at once (atomically)
            for name, text in replay_files(so_far, meta)[1].items():
                stage.run.write(name, text)

        with stage.watching() as watch, progress() as bar:
            outcome = run_replay(loaded, stage.placements, request, source=str(trace), on_pids=stage.target.on_pids,
                                 progress=bar, sessions=stage.sessions, fault_hooks=watch.injector,
                                 fault_points=stage.fault_plan.fault_points(),
                                 stragglers=faults_service.stragglers_by_rank(stage.fault_plan), on_iteration=keep,
                                 dilation=stage.dilation, auto_by_placement=True,
                                 link_rate_bps=(stage.target.topology or {}).get("link_rate_bps"))
        traced = PathRecorder(stage.target.info)  # while the testbed is up
        traced.replay("replay", outcome.flows)
        traced.write(stage.run)
        doc, files = replay_files(outcome, meta)
        for name, text in files.items():
            stage.run.write(name, text)
        stage.run.set_summary({"iteration_median_ns": doc["iteration_median_ns"],
                               **rank_memory_summary(dict(outcome.peak_rss_kb)), **stage.summary()})
    return ReplayResult(stage.run.run_dir, stage.run.status, outcome, doc, watch.links(), watch.capture, warnings,
                        stage.dilation)
