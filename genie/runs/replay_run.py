"""`genie replay` as a service: the whole trace on the chosen target with its run directory, link observation,
capture and live faults; returns what the command prints."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

from genie.core.records import ReplayOutcome
from genie.engine.replay import ReplayRequest
from genie.runs.options import RunOptions

ReplayProgress = Callable[[], ContextManager[Callable[[int, int], None]]]


@dataclass(frozen=True)
class ReplayCommand:
    trace: Path
    request: ReplayRequest
    options: RunOptions
    npus: Optional[int] = None  # ranks of an ASTRA-sim text workload


@dataclass(frozen=True)
class ReplayResult:
    run: Any  # genie.report.manifest.RunRecorder (closed)
    outcome: ReplayOutcome
    doc: dict[str, Any]  # replay.json's document
    links: Optional[dict[str, Any]]
    capture: Any  # genie.report.capture result, or None


def run_replay_command(cmd: ReplayCommand, progress: ReplayProgress) -> ReplayResult:
    """Load and check the trace, validate the target, launch and faults (InputError: nothing started), then
    replay it. `progress()` is entered around the replay and yields a callback(done, total)."""
    from genie.engine.program import build_programs
    from genie.engine.replay import check_fits, run_replay
    from genie.faults import service as faults_service
    from genie.report.manifest import RunRecorder, input_digest
    from genie.report.replay import replay_files
    from genie.runs.launch import check_launch, launch_meta, launch_target, other_target, resolve_launch
    from genie.runs.target import capture_end_for, open_target, watched
    from genie.workloads.analysis import check
    from genie.workloads.loader import load_trace

    opts, request, trace = cmd.options, cmd.request, cmd.trace
    opts.check()
    faults = faults_service.read_faults(opts.faults_file, list(opts.faults))
    loaded = load_trace(trace, npus=cmd.npus)
    check(loaded, source=str(trace))
    ranks = loaded.num_ranks
    digest = input_digest(trace, "trace")
    choice = resolve_launch(opts.launcher, opts.transport, opts.inventory, opts.mpiexec,
                            port_range=opts.port_range, replay=True,
                            other_target=other_target(opts.topology, opts.testbed, opts.loopback))
    faults_service.check_launcher(faults, choice.sessions is None)
    bounds = faults_service.replay_bounds(build_programs(loaded, source=str(trace)) if faults else (),
                                          request.iterations, request.warmup, request.timeout_s, faults)
    faults_service.precheck_topology(faults, opts.topology, lambda _ranks: bounds)
    with launch_target(choice, opts.inventory,
                       lambda: open_target(opts.topology, opts.testbed, opts.loopback,
                                           ranks if opts.loopback else None)) as target:
        check_launch(choice, check_fits(loaded, target.placements, source=str(trace)))
        fault_plan = faults_service.plan(faults, target.info, bounds)
        capture_end = capture_end_for(target, opts.capture)
        params = {"iterations": request.iterations, "warmup": request.warmup, "npus": cmd.npus, "ranks": ranks,
                  **opts.extra_params(), **({"faults": fault_plan.specs()} if fault_plan else {})}
        with RunRecorder("replay", out=opts.out, inputs=(digest, *target.inputs), params=params) as run:
            run.describe(target=target.name, shaper=target.shaper, topology=target.topology)
            with watched(run, target, sample_ms=opts.sample_ms, capture_end=capture_end,
                         fault_plan=fault_plan) as watch, progress() as bar:
                outcome = run_replay(loaded, target.placements, request, source=str(trace), on_pids=target.on_pids,
                                     progress=bar, sessions=choice.sessions, fault_hooks=watch.injector,
                                     fault_points=fault_plan.fault_points(),
                                     stragglers=faults_service.stragglers_by_rank(fault_plan))
            if choice.sessions is not None:
                run.write("launch.json", json.dumps(launch_meta(opts.launcher, opts.transport, choice), indent=2))
            doc, files = replay_files(outcome, {"trace": str(trace), "target": target.name, "ranks": ranks,
                                                "iterations": request.iterations, "warmup": request.warmup})
            for name, text in files.items():
                run.write(name, text)
            run.set_summary({"iteration_median_ns": doc["iteration_median_ns"], **watch.summary()})
    return ReplayResult(run, outcome, doc, watch.links(), watch.capture)
