"""``genie experiment``: measure, calibrate, estimate, replay and compare, on one testbed.

1. load the spec, the workload (pinning the chosen algorithms) and the topology; map the topology onto ASTRA-sim
   dimensions and plan the sweep - all checked before anything is built;
2. bring the testbed up (``genie.testbed.service.temporary_testbed``: always torn down);
3. in ``rounds`` alternating rounds (so that both see the same conditions on a shared machine): bench every
   (collective, algorithm, group size) the trace runs at exactly its sizes plus a grid, on the trace's own groups
   (``sweep.csv`` with medians; ``sweep_detail.csv`` with every pooled iteration, whose trimmed mean the
   estimate uses), then replay the whole trace (warmup + iterations; the median of all rounds' iterations is
   "measured");
4. tear down; calibrate (``calibration.json/csv``), estimate in both modes (``estimate-<mode>.csv``), export the
   calibrated ASTRA-sim inputs (``astra/``), compare (``accuracy.csv``: workload, topology, mode, estimated_s,
   measured_s, error_pct) and write ``summary.txt``.

This module is the adapter's edge to the testbed and the engine; everything it decides is in the pure modules.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from statistics import median
from typing import Callable

from genie.core.collective import Collective
from genie.core.errors import InputError
from genie.core.files import write_atomic
from genie.core.sizes import dtype_bytes_for
from genie.core.topology import Topology
from genie.core.trace import Trace

from astra_adapter.calibrate import Calibration, calibrate, calibrated_network, scaled_trace
from astra_adapter.calibration_io import write_calibration
from astra_adapter.experiment_spec import ExperimentSpec, SweepCase, generate_workload, pin_algorithms, plan_sweep
from astra_adapter.export import export_astra
from astra_adapter.mapping import TopologyMapping, map_topology
from astra_adapter.measurements import DETAIL_FILE, Measurement, MeasurementTable, detail_csv, op_time_us
from astra_adapter.workload_estimate import TraceEstimate, estimate_calibrated, estimate_measured, write_estimate

ACCURACY_COLUMNS = ("workload", "topology", "mode", "estimated_s", "measured_s", "error_pct")
Progress = Callable[[str], None]


class Statistic(Enum):
    """How iterations become one number. TYPICAL (the reported accuracy): an op's trimmed mean
    (``measurements.op_time_us``: ops add up along a trace) and the replay's median iteration. BEST: the fastest
    iteration of each - roughly what an undisturbed machine gives, shown beside it to tell load from model."""

    TYPICAL = "typical"
    BEST = "best"


@dataclass(frozen=True)
class PreparedExperiment:
    spec: ExperimentSpec
    trace: Trace
    topology: Topology
    mapping: TopologyMapping
    sweep: tuple[SweepCase, ...]


@dataclass(frozen=True)
class AccuracyRow:
    workload: str
    topology: str
    mode: str
    estimated_s: float
    measured_s: float

    @property
    def error_pct(self) -> float:
        return (self.estimated_s - self.measured_s) / self.measured_s * 100 if self.measured_s else float("nan")


@dataclass(frozen=True)
class ExperimentResult:
    run_dir: Path
    prepared: PreparedExperiment
    measurements: tuple[Measurement, ...]
    calibration: Calibration
    estimates: tuple[TraceEstimate, ...]
    replay_iteration_ns: tuple[int, ...]
    accuracy: tuple[AccuracyRow, ...]
    best_of: tuple[AccuracyRow, ...] = ()  # the same comparison with Statistic.MIN
    load_average: tuple[float, float] = ()  # 1-minute load average before and after the testbed work

    @property
    def measured_ns(self) -> int:
        return int(median(self.replay_iteration_ns))


# ---- preparing (pure but for reading files) -------------------------------------------------------------
def load_workload(spec: ExperimentSpec) -> Trace:
    from genie.workloads.analysis import check
    from genie.workloads.loader import load_trace

    if spec.workload.trace_path is not None:
        if not spec.workload.trace_path.exists() and not list(spec.workload.trace_path.parent.glob(
                spec.workload.trace_path.name + ".*.et")):
            raise InputError(f"no such trace: {spec.workload.trace_path}", source=spec.source, path="workload.trace")
        trace = load_trace(spec.workload.trace_path, npus=spec.workload.npus)
    else:
        trace = generate_workload(spec.workload.generate, source=spec.source)
    trace = pin_algorithms(trace, spec.algorithms)
    check(trace, source=str(spec.workload.trace_path or spec.source))
    return trace


def prepare(spec: ExperimentSpec) -> PreparedExperiment:
    """Everything that can fail on bad input, before a testbed exists."""
    from genie.topology import load_topology_file

    if not spec.topology_path.is_file():
        raise InputError(f"no such topology file: {spec.topology_path}", source=spec.source, path="topology")
    topology = load_topology_file(spec.topology_path)
    mapping = map_topology(topology, source=str(spec.topology_path))
    trace = load_workload(spec)
    if trace.num_ranks != topology.world_size:
        raise InputError(f"the workload has {trace.num_ranks} ranks but topology {topology.name} runs "
                         f"{topology.world_size}; they must be equal (the ASTRA-sim network is the whole testbed)",
                         source=spec.source, path="workload")
    sweep = plan_sweep(trace, spec.grid_bytes)
    for case in sweep:
        for size in case.sizes:
            for group in case.groups:
                _bench_op(case, size, group)  # the bench can build every schedule
    return PreparedExperiment(spec, trace, topology, mapping, sweep)


def _bench_op(case: SweepCase, size_bytes: int, group: tuple[int, ...]):
    from genie.collectives.registry import build_schedule
    from genie.core.schedule import CollectiveOp

    op = case.op(size_bytes)
    dtype = dtype_bytes_for(size_bytes)
    peer = group[-1] if op.collective is Collective.SEND_RECV else None
    collective_op = CollectiveOp(collective=op.collective, size_bytes=size_bytes, group=group,
                                 algorithm=op.algorithm, root=group[0], peer=peer, dtype_bytes=dtype)
    try:
        build_schedule(collective_op)
    except ValueError as exc:
        raise InputError(f"{op.describe()}: {exc}", path="algorithms") from None
    return collective_op


# ---- on the testbed -----------------------------------------------------------------------------------
def sweep_items(sweep: tuple[SweepCase, ...]) -> list[tuple[SweepCase, int]]:
    return [(c, s) for c in sweep for s in c.sizes]


def run_sweep(sweep: tuple[SweepCase, ...], placements: list, *, iterations: int, warmup: int, timeout_s: float,
              on_pids=None, progress: Progress | None = None) -> list[list[int]]:
    """Bench every (case, size) of ``sweep_items`` in one rank session: each rank runs the op of its own group
    (sibling groups at once; a rank in none of a case's groups sits it out); an iteration ends with the slowest
    group. Per item, its iteration times (ns)."""
    from genie.engine.jobs import BenchCase, BenchJob, bench_job_to_json
    from genie.engine.session import RankSession
    from genie.measure.metrics import iteration_times_ns

    items = sweep_items(sweep)

    def job_for(rank: int) -> dict:
        cases = []
        for case, size in items:
            group = next((g for g in case.groups if rank in g), case.groups[0])
            cases.append(BenchCase(_bench_op(case, size, group), warmup, iterations))
        return bench_job_to_json(BenchJob(cases=tuple(cases), timeout_s=timeout_s))

    found: dict[int, list[int]] = {}

    def on_case(index: int, per_rank: dict) -> None:
        case, size = items[index]
        found[index] = iteration_times_ns({r: m["iterations"] for r, m in per_rank.items()})
        if progress:
            progress(f"bench {len(found)}/{len(items)}: {case.collective.value} on {len(case.groups)} group(s) of "
                     f"{case.ranks}, {size} B")

    session = RankSession(placements, on_pids=on_pids, idle_timeout_s=max(120.0, timeout_s * 2))
    session.run(job_for, on_case=on_case)
    return [found[i] for i in range(len(items))]


def sweep_stats(sweep: tuple[SweepCase, ...], times: list[list[int]]) -> list:
    """CaseStats per (case, size) from its pooled iteration times."""
    from genie.measure.metrics import case_stats

    out = []
    for (case, size), t in zip(sweep_items(sweep), times):
        op = case.op(size)
        out.append(case_stats(op.collective, op.algorithm, case.ranks, size, dtype_bytes_for(size), t))
    return out


def measurements_of(stats: list, sweep: tuple[SweepCase, ...], times: list[list[int]],
                    statistic: Statistic = Statistic.TYPICAL) -> tuple[Measurement, ...]:
    """One Measurement per (case, size): :func:`op_time_us` of its pooled iterations (TYPICAL) or the fastest
    (BEST), with the groups it ran on."""
    out = []
    for s, (case, _), t in zip(stats, sweep_items(sweep), times):
        iterations = tuple(x / 1000 for x in t)
        value = op_time_us(iterations) if statistic is Statistic.TYPICAL else min(iterations)
        out.append(Measurement(s.collective, s.algorithm, s.ranks, s.size_bytes, value, "sweep", case.groups,
                               iterations))
    return tuple(out)


def _merged(outcomes: list):
    """One ReplayOutcome holding every round's iterations, numbered in order."""
    iterations = [replace(it, iteration=i) for i, it in enumerate(it for o in outcomes for it in o.iterations)]
    return replace(outcomes[0], iterations=tuple(iterations))


def run_on_testbed(prepared: PreparedExperiment, progress: Progress | None = None):
    """Sweep and replay on a temporary testbed (always torn down), in ``rounds`` alternating rounds so that
    both see the same conditions on a shared machine; (bench stats, pooled iteration times per sweep item,
    replay outcome with every round's iterations)."""
    from genie.engine.bench import placements_for
    from genie.engine.replay import ReplayRequest, run_replay
    from genie.testbed import service

    spec = prepared.spec
    say = progress or (lambda _msg: None)
    rounds = spec.rounds
    sweep_each, replay_each = -(-spec.sweep_iterations // rounds), -(-spec.replay_iterations // rounds)
    say(f"bringing up {prepared.topology.name}")
    with service.temporary_testbed(prepared.topology, source=str(spec.topology_path)) as info:
        placements = placements_for(info, None)

        def on_pids(pids: list[int]) -> None:
            service.register_pids(info.name, pids)

        pooled: list[list[int]] = [[] for _ in sweep_items(prepared.sweep)]
        outcomes = []
        for r in range(rounds):
            say(f"round {r + 1}/{rounds}: sweep, {sweep_each} iterations per size")
            times = run_sweep(prepared.sweep, placements, iterations=sweep_each, warmup=spec.sweep_warmup,
                              timeout_s=spec.timeout_s, on_pids=on_pids, progress=progress)
            for acc, t in zip(pooled, times):
                acc.extend(t)
            say(f"round {r + 1}/{rounds}: replay of {spec.workload.describe()}, {spec.replay_warmup} warmup + "
                f"{replay_each} iterations")
            request = ReplayRequest(iterations=replay_each, warmup=spec.replay_warmup, timeout_s=spec.timeout_s)
            outcomes.append(run_replay(prepared.trace, placements, request, source=spec.workload.describe(),
                                       on_pids=on_pids))
        say("tearing down")
    return sweep_stats(prepared.sweep, pooled), pooled, _merged(outcomes)


def replay_iteration_times(outcome) -> tuple[int, ...]:
    from genie.measure.replay import iteration_time_ns, rank_summaries

    return tuple(iteration_time_ns(rank_summaries(outcome.programs, it)) for it in outcome.iterations)


# ---- after the testbed ---------------------------------------------------------------------------------
def evaluate(prepared: PreparedExperiment, measurements: tuple[Measurement, ...], replay_ns: tuple[int, ...],
             statistic: Statistic = Statistic.TYPICAL
             ) -> tuple[Calibration, tuple[TraceEstimate, ...], tuple[AccuracyRow, ...]]:
    """Calibrate, estimate in both modes and compare with the replay's median (or best) iteration (pure)."""
    calibration = calibrate(measurements, prepared.mapping, fit_endpoint_delay=prepared.spec.fit_endpoint_delay)
    measured_mode = estimate_measured(prepared.trace, MeasurementTable(measurements),
                                      share_nic=prepared.spec.share_nic)
    calibrated_mode = estimate_calibrated(prepared.trace, prepared.mapping, calibration)
    measured_s = (median(replay_ns) if statistic is Statistic.TYPICAL else min(replay_ns)) / 1e9
    rows = tuple(AccuracyRow(prepared.spec.workload.describe(), prepared.topology.name, e.mode.value,
                             e.iteration_ns / 1e9, measured_s) for e in (measured_mode, calibrated_mode))
    return calibration, (measured_mode, calibrated_mode), rows


def accuracy_csv(rows: tuple[AccuracyRow, ...] | list[AccuracyRow]) -> str:
    lines = [",".join(ACCURACY_COLUMNS)]
    for r in rows:
        lines.append(f"{r.workload},{r.topology},{r.mode},{r.estimated_s:.6f},{r.measured_s:.6f},{r.error_pct:.3f}")
    return "\n".join(lines) + "\n"


def format_summary(result: ExperimentResult) -> str:
    p = result.prepared
    cal = result.calibration
    dims = "; ".join(f"{d.topology.value} {d.npus_count}: {d.bandwidth_gb_per_s * 2**30 * 8 / 1e9:.3f} Gbit/s, "
                     f"{d.latency_ns / 1e3:.1f} us/hop" + ("" if d.fitted else " (not fitted)") for d in cal.dims)
    lines = [f"# experiment {p.spec.name}: {p.spec.workload.describe()} on {p.topology.name} "
             f"({p.trace.num_ranks} ranks, {p.mapping.shape.value} -> "
             f"{' x '.join(f'{d.topology.value}({d.npus_count})' for d in p.mapping.dims)})",
             f"sweep: {len(result.measurements)} sizes in {len(p.sweep)} curves; calibration: {dims}, endpoint "
             f"delay {cal.endpoint_delay_ns} ns, rms residual {cal.rms_residual_pct:.2f}%",
             f"replay: {len(result.replay_iteration_ns)} iterations, median {result.measured_ns / 1e6:.3f} ms "
             f"(min {min(result.replay_iteration_ns) / 1e6:.3f}, max {max(result.replay_iteration_ns) / 1e6:.3f})",
             f"{'mode':<11} {'estimated_ms':>13} {'measured_ms':>12} {'error':>8}  exposed comm (max rank)"]
    for row, est in zip(result.accuracy, result.estimates):
        exposed = max(r.exposed_comm_ns for r in est.ranks) / 1e6
        lines.append(f"{row.mode:<11} {row.estimated_s * 1e3:>13.3f} {row.measured_s * 1e3:>12.3f} "
                     f"{row.error_pct:>+7.2f}%  {exposed:.3f} ms")
    if result.best_of:
        lines.append("best iterations (fastest of each op, fastest replay): " + ", ".join(
            f"{r.mode} {r.estimated_s * 1e3:.3f} vs {r.measured_s * 1e3:.3f} ms ({r.error_pct:+.2f}%)"
            for r in result.best_of))
    if result.load_average:
        lines.append(f"load average (1 min) before/after: {result.load_average[0]:.2f}/{result.load_average[1]:.2f}"
                     f" on {os.cpu_count()} CPUs")
    for est in result.estimates:
        if est.extrapolated:
            lines.append(f"# {est.mode.value}: {len(est.extrapolated)} op(s) timed by the calibrated model")
    lines.append(f"# results in {result.run_dir}")
    return "\n".join(lines)


def write_results(result: ExperimentResult, stats: list, outcome) -> None:
    from genie.report.replay import write_replay
    from genie.report.sweep import write_sweep

    out, p = result.run_dir, result.prepared
    write_sweep(out, stats, meta={"experiment": p.spec.name, "topology": p.topology.name,
                                  "iterations": p.spec.sweep_iterations, "warmup": p.spec.sweep_warmup})
    write_atomic(out / DETAIL_FILE, detail_csv(result.measurements).encode())
    write_replay(out / "replay", outcome, {"trace": p.spec.workload.describe(), "target": p.topology.name,
                                           "ranks": p.trace.num_ranks, "iterations": p.spec.replay_iterations,
                                           "warmup": p.spec.replay_warmup})
    write_calibration(result.calibration, out)
    for est in result.estimates:
        write_estimate(est, out, f"estimate-{est.mode.value}.csv")
    network, _ = calibrated_network(p.mapping, result.calibration)
    export_astra(scaled_trace(p.trace, result.calibration), p.mapping, out / "astra", network=network,
                 params=result.calibration.system_params())
    write_atomic(out / "accuracy.csv", accuracy_csv(result.accuracy).encode())
    doc = {"experiment": p.spec.name, "source": p.spec.source, "workload": p.spec.workload.describe(),
           "topology": p.topology.name, "replay_iteration_ns": list(result.replay_iteration_ns),
           "accuracy": [{**r.__dict__, "error_pct": r.error_pct} for r in result.accuracy],
           "best_of": [{**r.__dict__, "error_pct": r.error_pct} for r in result.best_of],
           "load_average": list(result.load_average)}
    write_atomic(out / "experiment.json", (json.dumps(doc, indent=1) + "\n").encode())
    write_atomic(out / "summary.txt", (format_summary(result) + "\n").encode())


def run_experiment(spec: ExperimentSpec, run_dir_factory: Callable[[], Path],
                   progress: Progress | None = None) -> ExperimentResult:
    """The whole experiment; the run directory is created only once the testbed work succeeded."""
    prepared = prepare(spec)
    load_before = os.getloadavg()[0]
    stats, times, outcome = run_on_testbed(prepared, progress)
    load_after = os.getloadavg()[0]
    measurements = measurements_of(stats, prepared.sweep, times)
    replay_ns = replay_iteration_times(outcome)
    calibration, estimates, rows = evaluate(prepared, measurements, replay_ns)
    _, _, best = evaluate(prepared, measurements_of(stats, prepared.sweep, times, Statistic.BEST), replay_ns,
                          Statistic.BEST)
    result = ExperimentResult(run_dir_factory(), prepared, measurements, calibration, estimates, replay_ns, rows,
                              best, (load_before, load_after))
    write_results(result, stats, outcome)
    return result
