"""`genie bench` as a service: a sweep on the chosen target with its run directory, link observation, capture
and live faults; returns what the command prints."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional

from genie.engine.bench import BenchOutcome, BenchRequest
from genie.runs.options import RunOptions

BenchProgress = Callable[[], ContextManager[Callable[[int, int, Any], None]]]


@dataclass(frozen=True)
class BenchCommand:
    request: BenchRequest
    options: RunOptions


@dataclass(frozen=True)
class BenchResult:
    run: Any  # genie.report.manifest.RunRecorder (closed)
    outcome: BenchOutcome
    doc: dict[str, Any]  # sweep.json's document
    links: Optional[dict[str, Any]]  # link/TCP counter summary (None for loopback)
    capture: Any  # genie.report.capture result, or None
    link_rate_bps: Optional[int]


def run_bench_command(cmd: BenchCommand, progress: BenchProgress) -> BenchResult:
    """Validate everything first (InputError: nothing started), then run the sweep. `progress()` is entered
    around the sweep and yields a callback(done, total, case stats)."""
    from genie.engine import bench as service
    from genie.faults import service as faults_service
    from genie.report.manifest import RunRecorder
    from genie.report.sweep_recorder import SweepRecorder
    from genie.runs.launch import check_launch, launch_meta, launch_target, other_target, resolve_launch
    from genie.runs.target import capture_end_for, open_target, watched

    request, opts = cmd.request, cmd.options
    opts.check()
    config = {"min_bytes": request.min_bytes, "max_bytes": request.max_bytes, "step_factor": request.factor,
              "warmup_iters": request.warmup, "iterations": request.iterations, "verify": request.verify}
    faults = faults_service.read_faults(opts.faults_file, list(opts.faults))
    choice = resolve_launch(opts.launcher, opts.transport, opts.inventory, opts.mpiexec, ranks=request.ranks,
                            port_range=opts.port_range,
                            other_target=other_target(opts.topology, opts.testbed, opts.loopback))
    faults_service.check_launcher(faults, choice.sessions is None)
    faults_service.precheck_topology(
        faults, opts.topology, lambda n: faults_service.bench_bounds(service.build_job(request, request.ranks or n)))
    with launch_target(choice, opts.inventory,
                       lambda: open_target(opts.topology, opts.testbed, opts.loopback, request.ranks)) as target:
        job = service.build_job(request, len(target.placements))  # validate before anything starts
        check_launch(choice, target.placements)
        fault_plan = faults_service.plan(faults, target.info, faults_service.bench_bounds(job))
        capture_end = capture_end_for(target, opts.capture)
        meta = {"target": target.name, "ranks": len(target.placements), "verify": request.verify,
                "iterations": request.iterations, "warmup": request.warmup}
        params = {**config, "algorithm": request.algorithm.value, "chunks": request.chunks,
                  "steps": request.record_steps, **opts.extra_params(),
                  **({"faults": fault_plan.specs()} if fault_plan else {})}
        with RunRecorder("bench", out=opts.out, inputs=target.inputs, params=params) as run:
            run.describe(target=target.name, shaper=target.shaper, topology=target.topology)
            files = SweepRecorder(run, meta)
            with watched(run, target, sample_ms=opts.sample_ms, capture_end=capture_end,
                         fault_plan=fault_plan) as watch, progress() as bar:
                outcome = service.run_bench(request, target.placements, on_pids=target.on_pids,
                                            progress=lambda d, t, s: (bar(d, t, s), files.add(d, t, s)),
                                            sessions=choice.sessions, fault_hooks=watch.injector,
                                            fault_points=fault_plan.fault_points())
            if choice.sessions is not None:
                run.write("launch.json", json.dumps(launch_meta(opts.launcher, opts.transport, choice), indent=2))
            doc = files.finish(outcome, config=config, devices=target.devices(), steps=request.record_steps)
            run.set_summary({"cases": len(outcome.stats), **watch.summary()})
    return BenchResult(run, outcome, doc, watch.links(), watch.capture, (target.topology or {}).get("link_rate_bps"))
