"""`genie experiment` with a job mix as its workload (``workload: {jobs: FILE}``): measure, calibrate, replay,
estimate and compare per job, on one target in one run directory.

1. before anything is up: the spec, the mix read, checked and placed on the spec's topology
   (``genie.services.mix.place_mix``), the algorithms pinned on every job, the sweep planned on the mix's
   merged trace (:func:`astra_adapter.experiment_mix.mix_sweep`);
2. one stage (`genie.services.stage`): the sweep through the bench path on the jobs' own groups, then the mix
   replayed as ``genie replay --jobs`` replays it (``genie.services.mix_replay.replay_mix_on``: every job alone
   on its slots, then all at once; per job its own replay files, ``mix.csv``, ``jobs_paths.json``...);
3. the fabric model fitted on the sweep (with the paths its connections took) and the mix estimated with it
   (``astra_adapter.fabric.mix.estimate_mix``) on the replay's own sessions' paths and repetitions; per job
   estimated vs measured iteration alone and together, slowdown and error: ``jobs_accuracy.csv``,
   ``jobs_estimate.csv``, ``jobs_links.csv``, ``fabric_calibration.json``, ``experiment.json``, ``summary.txt``,
   all listed in the manifest.

One round (the alone runs and the mix are the replay's comparison already); faults are refused as
``genie replay --jobs`` refuses them. The ASTRA-sim modes are single-job models: a mix is the fabric model's.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from astra_adapter.experiment_mix import MixExperimentResult
from genie.core.errors import InputError
from genie.core.testbed import LinkModel

Progress = Callable[[str], None]


def _placed(spec: Any) -> Any:
    """The mix of ``spec`` read, its algorithms pinned, placed on the spec's topology (bad input fails here)."""
    from astra_adapter.experiment_spec import pin_algorithms
    from genie.engine.program import build_programs
    from genie.services.mix import place_mix, read_mix
    from genie.topology import load_topology_file

    if not spec.topology_path.is_file():
        raise InputError(f"no such topology file: {spec.topology_path}", source=spec.source, path="topology")
    if not spec.workload.jobs_path.is_file():
        raise InputError(f"no such job mix file: {spec.workload.jobs_path}", source=spec.source,
                         path="workload.jobs")
    if spec.rounds != 1:
        raise InputError(f"a job mix runs in one round (its alone runs and the mix are the comparison); this one "
                         f"has {spec.rounds}", source=spec.source, path="rounds")
    topology = load_topology_file(spec.topology_path)
    mix, traces = read_mix(spec.workload.jobs_path)
    traces = tuple(pin_algorithms(t, spec.algorithms) for t in traces)
    for j, t in enumerate(traces):
        build_programs(t, source=f"{mix.source}: jobs[{j}]")
    return place_mix(mix, traces, topology)


def run_mix_experiment(cmd: Any, progress: Progress | None = None) -> MixExperimentResult:
    """The whole mix experiment of ``cmd`` (a ``genie.services.experiment.ExperimentCommand``)."""
    from astra_adapter.experiment import measurements_of, sweep_items, sweep_ops, sweep_stats
    from astra_adapter.experiment_mix import (MIX_ACCURACY_CSV, compare_jobs, format_mix_summary,
                                              jobs_accuracy_csv, mix_experiment_json, mix_sweep)
    from astra_adapter.fabric.calibrate import calibrate_fabric, summary_lines
    from astra_adapter.fabric.calibration_io import FABRIC_CALIBRATION_JSON, fabric_calibration_json
    from astra_adapter.fabric.mix import estimate_mix
    from astra_adapter.fabric.network import FabricNetwork
    from astra_adapter.measurements import DETAIL_FILE, detail_csv, workload_weights
    from genie.faults import service as faults_service
    from genie.report.manifest import input_digest
    from genie.report.sweep import sweep_csv, sweep_json
    from genie.services.cases import GroupCase, run_cases
    from genie.services.connection_paths import PathRecorder
    from genie.services.mix import estimates_csv, links_csv, refuse_faults, replay_paths
    from genie.services.mix_replay import replay_mix_on
    from genie.services.replay import ReplayRequest
    from genie.services.stage import staged
    from genie.workloads.mix import merge_jobs

    say = progress or (lambda _msg: None)
    spec = cmd.spec
    opts = cmd.options
    refuse_faults(opts)
    if opts.inventory is None and opts.testbed is None and not opts.loopback:
        opts = dataclasses.replace(opts, topology=spec.topology_path)
    placed = _placed(spec)
    topology, n = placed.topology, len(placed.traces)
    merged, _ = merge_jobs(list(placed.traces), placed.names, list(placed.slots), [1] * n, [0] * n,
                           world=topology.world_size)
    sweep = mix_sweep(merged, topology, spec.grid_bytes)
    items = sweep_items(sweep)
    cases = [GroupCase(sweep_ops(case, size), spec.sweep_warmup, spec.sweep_iterations) for case, size in items]
    request = ReplayRequest(iterations=spec.replay_iterations, warmup=spec.replay_warmup, timeout_s=spec.timeout_s)
    params = {"experiment": spec.name, "workload": "jobs", "jobs": placed.names,
              "slots": [list(s) for s in placed.slots], "sweep_iterations": spec.sweep_iterations,
              "sweep_warmup": spec.sweep_warmup, "replay_iterations": spec.replay_iterations,
              "replay_warmup": spec.replay_warmup}
    inputs = (input_digest(spec.source, "experiment"), input_digest(spec.workload.jobs_path, "jobs"),
              *(input_digest(j.trace_path, "trace") for j in placed.mix.jobs
                if j.trace_path is not None and j.trace_path.is_file()))

    def bounds(_ranks: int, _faults: list) -> Any:
        return faults_service.replay_bounds((), spec.replay_iterations, spec.replay_warmup, spec.timeout_s, [])

    def bench_progress(done: int, total: int, _stats: Any) -> None:
        case, size = items[done - 1]
        say(f"bench {done}/{total}: {case.collective.value} on {len(case.groups)} group(s) of {case.ranks}, "
            f"{size} B")

    load_before = os.getloadavg()[0]
    say(f"bringing up {topology.name}" if opts.topology is not None else
        f"running on {opts.testbed or ('loopback' if opts.loopback else opts.inventory)}")
    with staged("experiment", opts, ranks=None, loopback_ranks=topology.world_size, params=params, bounds=bounds,
                inputs=inputs, name=f"experiment-{spec.name}") as stage:
        traced = PathRecorder(stage.target.info)
        say(f"sweep: {len(items)} sizes, {spec.sweep_iterations} iterations each")
        swept = run_cases(cases, stage.placements, timeout_s=spec.timeout_s, on_pids=stage.target.on_pids,
                          sessions=stage.sessions, progress=bench_progress, dilation=stage.dilation)
        traced.sweep("sweep", swept.flows)
        traced.write(stage.run)
        pooled = [list(s.iteration_ns) for s in swept.stats]
        stats = sweep_stats(sweep, pooled)
        meta = {"experiment": spec.name, "topology": topology.name, "iterations": spec.sweep_iterations,
                "warmup": spec.sweep_warmup}
        stage.run.write("sweep.csv", sweep_csv(stats))
        stage.run.write("sweep.json", sweep_json(stats, meta))
        measured = replay_mix_on(stage, placed, request, alone=True, jobs_path=spec.workload.jobs_path,
                                 progress=say)
        say("tearing down" if opts.topology is not None else "done")
        load_after = os.getloadavg()[0]
        measurements = measurements_of(stats, sweep, pooled)
        stage.run.write(DETAIL_FILE, detail_csv(measurements))
        cal = calibrate_fabric(measurements, FabricNetwork(topology, source=str(spec.topology_path)),
                               paths=tuple(traced.swept), weights=workload_weights(merged, measurements))
        stage.run.write(FABRIC_CALIBRATION_JSON, fabric_calibration_json(cal))
        # the links' HTB credit where this testbed's links are buckets at their stated rates (docs/jobs.md)
        info = stage.target.info
        credit = info is not None and info.links is LinkModel.BUCKET and not info.dilation.active  # None: loopback
        estimate = estimate_mix(list(placed.traces), placed.names, placed.slots, placed.offsets_ns,
                                placed.iterations, topology, dataclasses.replace(cal.params, htb_credit=credit),
                                placement=placed.placement,
                                source=str(spec.topology_path), **replay_paths(stage.run.run_dir, placed))
        stage.run.write("jobs_estimate.csv", estimates_csv([estimate]))
        if not (stage.run.run_dir / "jobs_links.csv").is_file():  # the replay's (a testbed's kernel paths) first
            stage.run.write("jobs_links.csv", links_csv([(estimate.placement, placed.names, estimate.links)]))
        result = MixExperimentResult(stage.run.run_dir, spec.name, topology.name, placed.placement,
                                     compare_jobs(measured, estimate), len(measurements),
                                     tuple(summary_lines(cal)), estimate.notes,
                                     tuple(f"{s.a}->{s.b}" for s in estimate.shared_links),
                                     (load_before, load_after))
        stage.run.write(MIX_ACCURACY_CSV, jobs_accuracy_csv(result.jobs))
        stage.run.write("experiment.json", mix_experiment_json(result))
        stage.run.write("summary.txt", format_mix_summary(result) + "\n")
        stage.run.set_summary({"jobs": {r.name: {"error_together_pct": r.error_together_pct,
                                                 "slowdown_points": r.slowdown_points} for r in result.jobs},
                               **stage.summary()})
    return result
