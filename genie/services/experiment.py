"""`genie experiment` as a service: measure, calibrate, estimate, replay and compare, on one target.

1. prepare (the adapter, pure): the spec, the workload with its pinned algorithms, the topology mapped onto
   ASTRA-sim dimensions and the sweep — all checked before anything is built;
2. one stage (`genie.services.stage`: launcher, target, faults, run directory, observation, capture) for the
   whole experiment; in ``rounds`` alternating rounds (so that both see the same conditions on a shared
   machine): the sweep through the bench path (`genie.services.bench.run_cases`: every (collective,
   algorithm, group size) the trace runs, on the trace's own disjoint groups at once), then the replay of the
   whole trace (`genie.services.replay.run_replay`); iterations are pooled over the rounds;
3. the adapter calibrates, estimates in both modes and compares (pure); the run directory gets the sweep
   (``sweep.csv``/``sweep.json``, ``sweep_detail.csv`` with every pooled iteration), the replay (``replay/``),
   the calibration, both estimates, the calibrated ASTRA-sim inputs (``astra/``), ``accuracy.csv``,
   ``experiment.json`` and ``summary.txt``, all listed in its manifest. On a testbed with equal-cost paths the
   path every connection of each round took is read from the kernels while the testbed is up (``paths.json``)
   and the fabric model is calibrated and compared on those ECMP draws (`genie.core.flowpath`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from astra_adapter.experiment import (ExperimentResult, PreparedExperiment, Statistic, evaluate, experiment_json,
                                      format_summary, measurements_of, prepare, sweep_items, sweep_ops, sweep_stats)
from astra_adapter.experiment_spec import ExperimentSpec
from genie.core.dilation import DilationMode
from genie.core.errors import InputError
from genie.services.connection_paths import PathRecorder
from genie.services.dilation import collective_steps, replay_iteration
from genie.services.options import RunOptions
from genie.core.records import ReplayOutcome

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ExperimentCommand:
    """The experiment `spec` and how to run it (`options`: launcher, data path, run directory, observation,
    capture, faults; the target is the spec's topology unless an inventory names real hosts)."""

    spec: ExperimentSpec
    options: RunOptions = RunOptions()


def _options(cmd: ExperimentCommand) -> RunOptions:
    opts = cmd.options
    if opts.inventory is None and opts.testbed is None and not opts.loopback:
        opts = dataclasses.replace(opts, topology=cmd.spec.topology_path)
    return opts


def run_experiment_command(cmd: ExperimentCommand, progress: Progress | None = None) -> ExperimentResult | Any:
    """The whole experiment in one run directory (its manifest says how far it got if it fails). A job mix
    workload is `genie.services.experiment_mix`'s (its result: astra_adapter.experiment_mix.MixExperimentResult)."""
    if cmd.spec.workload.jobs_path is not None:
        from genie.services.experiment_mix import run_mix_experiment

        return run_mix_experiment(cmd, progress)
    from genie.faults import service as faults_service
    from genie.engine.program import build_programs
    from genie.report.manifest import input_digest
    from genie.services.cases import GroupCase, run_cases, run_cases_per_size
    from genie.services.replay import ReplayRequest, check_fits, run_replay
    from genie.services.stage import staged

    say = progress or (lambda _msg: None)
    spec = cmd.spec
    prepared = prepare(spec)
    for warning in prepared.warnings:
        say(f"warning: {warning}")
    opts = _options(cmd)
    if (opts.faults or opts.faults_file) and spec.rounds != 1:
        raise InputError("faults are injected into the replay of an experiment with `rounds: 1`; this one has "
                         f"{spec.rounds}", path=opts.faults_field)
    rounds = spec.rounds
    sweep_each, replay_each = -(-spec.sweep_iterations // rounds), -(-spec.replay_iterations // rounds)
    replay_request = ReplayRequest(iterations=replay_each, warmup=spec.replay_warmup, timeout_s=spec.timeout_s)
    source = spec.workload.describe()

    def bounds(_ranks: int, faults: list) -> Any:
        programs = build_programs(prepared.trace, source=source) if faults else ()
        return faults_service.replay_bounds(programs, replay_each, spec.replay_warmup, spec.timeout_s, faults)

    items = sweep_items(prepared.sweep)

    def bench_progress(done: int, total: int, _stats: Any) -> None:
        case, size = items[done - 1]
        say(f"bench {done}/{total}: {case.collective.value} on {len(case.groups)} group(s) of {case.ranks}, "
            f"{size} B")

    cases = [GroupCase(sweep_ops(case, size), spec.sweep_warmup, sweep_each) for case, size in items]
    params = {"experiment": spec.name, "rounds": rounds, "sweep_iterations": spec.sweep_iterations,
              "sweep_warmup": spec.sweep_warmup, "replay_iterations": spec.replay_iterations,
              "replay_warmup": spec.replay_warmup, "ranks": prepared.trace.num_ranks}
    reference = None  # the NCCL model with a real cluster's calibration: pure, so refused before anything is up
    if spec.nccl_calibration is not None:
        from astra_adapter.nccl.experiment import nccl_reference

        reference, calibration_file = nccl_reference(prepared, spec.nccl_calibration)
        say(f"NCCL model with {calibration_file}: {reference.estimate.iteration_ns / 1e6:.3f} ms per iteration")
    inputs = (input_digest(spec.source, "experiment"),
              *((input_digest(spec.workload.trace_path, "trace"),) if spec.workload.trace_path else ()),
              *((input_digest(calibration_file, "calibration"),) if reference is not None else ()))
    load_before = os.getloadavg()[0]
    say(f"bringing up {prepared.topology.name}" if opts.topology is not None else
        f"running on {opts.testbed or ('loopback' if opts.loopback else opts.inventory)}")
    iteration, every_size, size_steps = None, (), None
    if opts.time_dilation.mode is DilationMode.AUTO:
        # each sweep size at its own factor; the replay (one clock) at genie replay's: weighed on its iteration
        iteration = replay_iteration(build_programs(prepared.trace, source=source))
        every_size = tuple(sorted({size for _, size in items}))

        def size_steps(_topology: Any) -> dict[int, tuple[Any, ...]]:
            """Each size weighed on the cases the sweep runs at it (genie bench's rule, `bench.size_steps`)."""
            return {size: tuple(collective_steps(sweep_ops(case, s)) for case, s in items if s == size)
                    for size in every_size}

        if opts.topology is not None and (opts.faults or opts.faults_file):
            raise InputError("under auto the sweep's sizes and the replay run at their own time dilations, and "
                             "faults are timed on one clock: give a fixed factor (--time-dilation N)", path=opts.faults_field)
    with staged("experiment", opts, ranks=None, loopback_ranks=prepared.trace.num_ranks, params=params,
                bounds=bounds, inputs=inputs, fits=lambda p: check_fits(prepared.trace, p, source=source),
                name=f"experiment-{spec.name}", iteration=iteration, sweep_sizes_bytes=every_size,
                size_steps=size_steps) as stage:
        plan = stage.target.dilation_plan
        dilator, replay_dilation = None, stage.dilation
        if plan is not None and stage.target.info is not None:
            from genie.services.dilation import SizeDilator

            replay_dilation = plan.replay or stage.dilation
            say("time dilation per size (docs/dilation.md):")
            for line in dataclasses.replace(plan, replay=replay_dilation).reasons():
                say(f"  {line}")
            dilator = SizeDilator(stage.target.info, scratch=opts.topology is not None)
        for warning in prepared.warnings:
            stage.run.warn(warning)
        pooled: list[list[int]] = [[] for _ in items]
        outcomes = []
        traced = PathRecorder(stage.target.info if prepared.fabric else None)
        with stage.watching() as watch:
            for r in range(rounds):
                say(f"round {r + 1}/{rounds}: sweep, {sweep_each} iterations per size")
                sweep = lambda part, **more: run_cases(  # noqa: E731
                    part, stage.placements, timeout_s=spec.timeout_s, on_pids=stage.target.on_pids,
                    sessions=stage.sessions, **{"progress": bench_progress, "dilation": stage.dilation, **more})
                swept = (sweep(cases) if dilator is None else
                         run_cases_per_size(cases, plan, dilator, sweep, bench_progress,
                                            restore=False))  # reshaped to the replay's at once, below
                if dilator is not None:
                    dilator.use(replay_dilation, size_bytes=None)
                for acc, stats in zip(pooled, swept.stats):
                    acc.extend(stats.iteration_ns)
                traced.sweep(f"round {r + 1} sweep", swept.flows)
                say(f"round {r + 1}/{rounds}: replay of {source}, {spec.replay_warmup} warmup + {replay_each} "
                    "iterations")
                outcomes.append(run_replay(prepared.trace, stage.placements, replay_request, source=source,
                                           on_pids=stage.target.on_pids, sessions=stage.sessions,
                                           fault_hooks=watch.injector, fault_points=stage.fault_plan.fault_points(),
                                           stragglers=faults_service.stragglers_by_rank(stage.fault_plan),
                                           dilation=replay_dilation))
                if dilator is not None:
                    dilator.restore()
                traced.replay(f"round {r + 1} replay", outcomes[-1].flows)
                write_rounds(stage.run, prepared, pooled, outcomes)  # a later failure keeps these rounds
                traced.write(stage.run)
            say("tearing down" if opts.topology is not None else "done")
        load_after = os.getloadavg()[0]
        outcome = merged(outcomes)
        stats = sweep_stats(prepared.sweep, pooled)
        measurements = measurements_of(stats, prepared.sweep, pooled)
        replay_ns = replay_iteration_times(outcome)
        calibration, estimates, rows = evaluate(prepared, measurements, replay_ns)
        best_measurements, impossible = _physically_possible(prepared, measurements_of(stats, prepared.sweep,
                                                                                     pooled, Statistic.BEST))
        _, _, best = evaluate(prepared, best_measurements, replay_ns, Statistic.BEST)
        fabric_cal = None
        if prepared.fabric:
            from astra_adapter.fabric.experiment import evaluate_fabric

            paths = {"sweep_paths": tuple(traced.swept), "replay_paths": tuple(traced.replayed)}
            fabric_cal, fabric_est, fabric_row = evaluate_fabric(prepared, measurements, replay_ns, **paths)
            estimates, rows = (*estimates, fabric_est), (*rows, fabric_row)
            best = (*best, evaluate_fabric(prepared, best_measurements, replay_ns, Statistic.BEST, **paths)[2])
        choices: tuple = ()
        if reference is not None:
            from astra_adapter.nccl.experiment import nccl_row

            estimates, rows = (*estimates, reference.estimate), (*rows, nccl_row(prepared, reference, replay_ns))
            best = (*best, nccl_row(prepared, reference, replay_ns, Statistic.BEST))
            choices = reference.choices
        result = ExperimentResult(stage.run.run_dir, prepared, measurements, calibration, estimates, replay_ns, rows,
                                  best, (load_before, load_after), fabric_cal, impossible, choices)
        write_results(stage.run, result, stats, outcome)
        stage.run.set_summary({"accuracy": [{"mode": r.mode, "error_pct": r.error_pct} for r in rows],
                               "replay_median_ns": result.measured_ns, **stage.summary()})
    return result


def _physically_possible(prepared: PreparedExperiment, best: tuple) -> tuple[tuple, int]:
    """The best-of measurements without iterations faster than the links allow (the fabric model's bound), and
    how many were left out."""
    from astra_adapter.fabric.calibrate import fastest_possible
    from astra_adapter.fabric.network import FabricNetwork

    return fastest_possible(best, FabricNetwork(prepared.topology))


def merged(outcomes: list[ReplayOutcome]) -> ReplayOutcome:
    """One ReplayOutcome holding every round's iterations, numbered in order."""
    iterations = [dataclasses.replace(it, iteration=i)
                  for i, it in enumerate(it for o in outcomes for it in o.iterations)]
    return dataclasses.replace(outcomes[0], iterations=tuple(iterations))


def replay_iteration_times(outcome: ReplayOutcome) -> tuple[int, ...]:
    from genie.measure.replay import iteration_time_ns, rank_summaries

    return tuple(iteration_time_ns(rank_summaries(outcome.programs, it)) for it in outcome.iterations)


def _replay_meta(p: PreparedExperiment) -> dict:
    return {"trace": p.spec.workload.describe(), "target": p.topology.name, "ranks": p.trace.num_ranks,
            "iterations": p.spec.replay_iterations, "warmup": p.spec.replay_warmup}


def write_rounds(run: Any, prepared: PreparedExperiment, pooled: list[list[int]],
                 outcomes: list[ReplayOutcome]) -> None:
    """The sweep and the replay of the rounds finished so far (rewritten, atomically, after each round; the
    calibration, estimates and comparison follow once every round is done)."""
    from genie.report.replay import replay_files
    from genie.report.sweep import sweep_csv, sweep_json

    stats = sweep_stats(prepared.sweep, pooled)
    meta = {"experiment": prepared.spec.name, "topology": prepared.topology.name,
            "iterations": prepared.spec.sweep_iterations, "warmup": prepared.spec.sweep_warmup}
    run.write("sweep.csv", sweep_csv(stats))
    run.write("sweep.json", sweep_json(stats, meta))
    for name, text in replay_files(merged(outcomes), _replay_meta(prepared))[1].items():
        run.write(f"replay/{name}", text)


def write_results(run: Any, result: ExperimentResult, stats: list, outcome: ReplayOutcome) -> None:
    """Every result file into `run` (a RunRecorder), each listed in the manifest as it is written."""
    from astra_adapter.calibrate import calibrated_network, scaled_trace
    from astra_adapter.calibration_io import CALIBRATION_CSV, CALIBRATION_JSON, calibration_csv, calibration_json
    from astra_adapter.export import export_astra
    from astra_adapter.experiment import accuracy_csv
    from astra_adapter.measurements import DETAIL_FILE, detail_csv
    from astra_adapter.workload_estimate import estimate_csv
    from genie.report.replay import replay_files
    from genie.report.sweep import sweep_csv, sweep_json

    p: PreparedExperiment = result.prepared
    meta = {"experiment": p.spec.name, "topology": p.topology.name, "iterations": p.spec.sweep_iterations,
            "warmup": p.spec.sweep_warmup}
    run.write("sweep.csv", sweep_csv(stats))
    run.write("sweep.json", sweep_json(stats, meta))
    run.write(DETAIL_FILE, detail_csv(result.measurements))
    _, files = replay_files(outcome, _replay_meta(p))
    for name, text in files.items():
        run.write(f"replay/{name}", text)
    if result.calibration is not None:  # None: no ASTRA-sim mapping (the fabric model's files follow)
        run.write(CALIBRATION_JSON, calibration_json(result.calibration))
        run.write(CALIBRATION_CSV, calibration_csv(result.calibration))
    if result.fabric_calibration is not None:
        from astra_adapter.fabric.calibration_io import FABRIC_CALIBRATION_JSON, fabric_calibration_json

        run.write(FABRIC_CALIBRATION_JSON, fabric_calibration_json(result.fabric_calibration))
    for est in result.estimates:
        run.write(f"estimate-{est.mode.value}.csv", estimate_csv(est))
    if result.nccl_choices:
        from astra_adapter.nccl.estimate import choices_csv

        run.write("nccl_choices.csv", choices_csv(result.nccl_choices))
    if p.mapping is not None and result.calibration is not None:
        network, _ = calibrated_network(p.mapping, result.calibration)
        exported = export_astra(scaled_trace(p.trace, result.calibration), p.mapping, run.run_dir / "astra",
                                network=network, params=result.calibration.system_params())
        for path in exported.files:
            run.record(str(Path(path).relative_to(run.run_dir)))
    run.write("accuracy.csv", accuracy_csv(result.accuracy))
    run.write("experiment.json", experiment_json(result))
    run.write("summary.txt", format_summary(result) + "\n")
