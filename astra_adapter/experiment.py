"""``genie experiment``'s pure part: prepare (load and check the spec, the workload with its pinned algorithms and
the topology; map the topology onto ASTRA-sim dimensions; plan the sweep), the sweep's ops, the measurements
taken from it, calibrate + estimate in both modes + compare with the replay (``evaluate``), and the result
files' contents. The testbed work (bench the sweep on the trace's own groups, replay the trace, in rounds) is
``genie.services.experiment``'s; this module never needs a live testbed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Callable

from genie.core.collective import Collective
from genie.core.errors import InputError
from genie.core.schedule import CollectiveOp
from genie.core.sizes import dtype_bytes_for
from genie.core.trace import Trace

from astra_adapter.calibrate import Calibration, calibrate
from astra_adapter.experiment_spec import ExperimentSpec, SweepCase, generate_workload, pin_algorithms, plan_sweep
from astra_adapter.experiment_types import AccuracyRow, PreparedExperiment, Statistic
from astra_adapter.fabric.calibrate import lower_bounds_us
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.mapping import TopologyMapping, map_topology
from astra_adapter.measurements import CommOp, Measurement, MeasurementTable, op_time_us, workload_weights
from astra_adapter.workload_estimate import EstimateMode, TraceEstimate, estimate_calibrated, estimate_measured

ACCURACY_COLUMNS = ("workload", "topology", "mode", "estimated_s", "measured_s", "error_pct")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class ExperimentResult:
    run_dir: Path
    prepared: PreparedExperiment
    measurements: tuple[Measurement, ...]
    calibration: Calibration | None  # None: the topology has no ASTRA-sim mapping
    estimates: tuple[TraceEstimate, ...]
    replay_iteration_ns: tuple[int, ...]
    accuracy: tuple[AccuracyRow, ...]
    best_of: tuple[AccuracyRow, ...] = ()  # the same comparison with Statistic.BEST
    load_average: tuple[float, float] = ()  # 1-minute load average before and after the testbed work
    fabric_calibration: object | None = None  # astra_adapter.fabric.calibrate.FabricCalibration (fabric topologies)
    best_impossible: int = 0  # sweep iterations faster than the links allow, left out of best_of
    nccl_choices: tuple = ()  # astra_adapter.nccl.estimate.OpChoice per op kind, with a real cluster's calibration

    @property
    def measured_ns(self) -> int:
        return int(median(self.replay_iteration_ns))


# ---- preparing (pure but for reading files) -------------------------------------------------------------
def load_workload(spec: ExperimentSpec) -> tuple[Trace, tuple[str, ...]]:
    """The experiment's workload, checked, and its warnings (analysis.check)."""
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
    return trace, check(trace, source=str(spec.workload.trace_path or spec.source))


def prepare(spec: ExperimentSpec) -> PreparedExperiment:
    """Everything that can fail on bad input, before a testbed exists. A topology ASTRA-sim's dimensions cannot
    express (:func:`map_topology` refuses it) is estimated by the fabric model alone: no mapping, no ASTRA-sim
    calibrated row, ``unmapped`` says why."""
    from genie.topology import load_topology_file

    if not spec.topology_path.is_file():
        raise InputError(f"no such topology file: {spec.topology_path}", source=spec.source, path="topology")
    topology = load_topology_file(spec.topology_path)
    mapping: TopologyMapping | None = None
    unmapped = ""
    try:
        mapping = map_topology(topology, source=str(spec.topology_path))
    except InputError as exc:
        unmapped = exc.detail
    trace, warnings = load_workload(spec)
    if trace.num_ranks != topology.world_size:
        raise InputError(f"the workload has {trace.num_ranks} ranks but topology {topology.name} runs "
                         f"{topology.world_size}; they must be equal (the modelled network is the whole testbed)",
                         source=spec.source, path="workload")
    sweep = plan_sweep(trace, spec.grid_bytes)
    for case in sweep:
        for size in case.sizes:
            sweep_ops(case, size)  # the bench can build every schedule
    from astra_adapter.fabric.estimate import fabric_by_default

    fabric = mapping is None or fabric_by_default(trace, topology)
    if fabric:
        from astra_adapter.fabric.experiment import cover_link_classes

        sweep = cover_link_classes(sweep, topology, spec.grid_bytes)
    return PreparedExperiment(spec, trace, topology, mapping, sweep, fabric, unmapped, warnings)


def sweep_ops(case: SweepCase, size_bytes: int) -> tuple[CollectiveOp, ...]:
    """The ops one sweep item measures: the case's op at `size_bytes` on each of its groups (side by side)."""
    from genie.collectives.registry import build_schedule

    out = []
    for group in case.groups:
        op = case.op(size_bytes)
        peer = group[-1] if op.collective is Collective.SEND_RECV else None
        collective_op = CollectiveOp(collective=op.collective, size_bytes=size_bytes, group=group,
                                     algorithm=op.algorithm, root=group[0], peer=peer,
                                     dtype_bytes=dtype_bytes_for(size_bytes))
        try:
            build_schedule(collective_op)
        except ValueError as exc:
            raise InputError(f"{op.describe()}: {exc}", path="algorithms") from None
        out.append(collective_op)
    return tuple(out)


# ---- on the testbed -----------------------------------------------------------------------------------
def sweep_items(sweep: tuple[SweepCase, ...]) -> list[tuple[SweepCase, int]]:
    return [(c, s) for c in sweep for s in c.sizes]


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


# ---- after the testbed ---------------------------------------------------------------------------------
def evaluate(prepared: PreparedExperiment, measurements: tuple[Measurement, ...], replay_ns: tuple[int, ...],
             statistic: Statistic = Statistic.TYPICAL
             ) -> tuple[Calibration | None, tuple[TraceEstimate, ...], tuple[AccuracyRow, ...]]:
    """Calibrate, estimate in both modes and compare with the replay's median (or best) iteration (pure). On a
    topology without an ASTRA-sim mapping: measured mode only, no calibration (the fabric row is
    :func:`astra_adapter.fabric.experiment.evaluate_fabric`'s)."""
    measured_mode = estimate_measured(prepared.trace, MeasurementTable(measurements),
                                      share_nic=prepared.spec.share_nic)
    estimates: tuple[TraceEstimate, ...] = (measured_mode,)
    calibration = None
    if prepared.mapping is not None:
        calibration = calibrate(measurements, prepared.mapping, fit_endpoint_delay=prepared.spec.fit_endpoint_delay,
                                bounds_us=lower_bounds_us(measurements, FabricNetwork(prepared.topology)),
                                weights=workload_weights(prepared.trace, measurements))
        estimates = (measured_mode, estimate_calibrated(prepared.trace, prepared.mapping, calibration))
    measured_s = (median(replay_ns) if statistic is Statistic.TYPICAL else min(replay_ns)) / 1e9
    rows = tuple(AccuracyRow(prepared.spec.workload.describe(), prepared.topology.name, e.mode.value,
                             e.iteration_ns / 1e9, measured_s) for e in estimates)
    return calibration, estimates, rows


def accuracy_csv(rows: tuple[AccuracyRow, ...] | list[AccuracyRow]) -> str:
    """accuracy.csv; a field with a comma (a generated workload: ``generated:model=gpt3,tp=2``) is quoted."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(ACCURACY_COLUMNS)
    for r in rows:
        writer.writerow((r.workload, r.topology, r.mode, f"{r.estimated_s:.6f}", f"{r.measured_s:.6f}",
                         f"{r.error_pct:.3f}"))
    return out.getvalue()


def _astra_lines(result: ExperimentResult) -> tuple[str, str]:
    """The topology as ASTRA-sim dimensions (for the title) and the ASTRA-sim calibration, or why there are none."""
    p, cal = result.prepared, result.calibration
    if p.mapping is None or cal is None:
        return ("not an ASTRA-sim dimension stack", f"no ASTRA-sim calibration or calibrated row: ASTRA-sim's "
                f"dimensions cannot express this topology ({p.unmapped}); the fabric model estimates it")
    dims = "; ".join(f"{d.topology.value} {d.npus_count}: {d.bandwidth_gb_per_s * 2**30 * 8 / 1e9:.3f} Gbit/s, "
                     f"{d.latency_ns / 1e3:.1f} us/hop" + ("" if d.fitted else " (not fitted)") for d in cal.dims)
    return (f"{p.mapping.shape.value} -> {' x '.join(f'{d.topology.value}({d.npus_count})' for d in p.mapping.dims)}",
            f"calibration: {dims}, endpoint delay {cal.endpoint_delay_ns} ns, rms residual "
            f"{cal.rms_residual_pct:.2f}%")


def _excluded_lines(result: ExperimentResult) -> list[str]:
    """The points the ASTRA-sim fit left out (faster than the links allow); one line when the fabric
    calibration's list above names the same points."""
    cal = result.calibration
    if cal is None or not cal.excluded:
        return []
    fabric = result.fabric_calibration
    if fabric is not None and {(p.op, p.groups[0]) for p in fabric.excluded} == {  # type: ignore[attr-defined]
            (CommOp(q.collective, q.algorithm, q.ranks, q.size_bytes), q.group) for q in cal.excluded}:
        return [f"# the ASTRA-sim calibration leaves out the same {len(cal.excluded)} point(s)"]
    return [f"# excluded from the ASTRA-sim calibration (faster than the links allow): {q.collective.value}/"
            f"{q.algorithm.value} on {q.ranks} ranks, {q.size_bytes} B: {q.measured_us:.1f} us < {q.bound_us:.1f} us"
            for q in cal.excluded]


def format_summary(result: ExperimentResult) -> str:
    p = result.prepared
    shape, calibration = _astra_lines(result)
    lines = [f"# experiment {p.spec.name}: {p.spec.workload.describe()} on {p.topology.name} "
             f"({p.trace.num_ranks} ranks, {shape})",
             f"sweep: {len(result.measurements)} sizes in {len(p.sweep)} curves; {calibration}",
             f"replay: {len(result.replay_iteration_ns)} iterations, median {result.measured_ns / 1e6:.3f} ms "
             f"(min {min(result.replay_iteration_ns) / 1e6:.3f}, max {max(result.replay_iteration_ns) / 1e6:.3f})",
             f"{'mode':<11} {'estimated_ms':>13} {'measured_ms':>12} {'error':>8}  exposed comm (max rank)"]
    for row, est in zip(result.accuracy, result.estimates):
        exposed = max(r.exposed_comm_ns for r in est.ranks) / 1e6
        lines.append(f"{row.mode:<11} {row.estimated_s * 1e3:>13.3f} {row.measured_s * 1e3:>12.3f} "
                     f"{row.error_pct:>+7.2f}%  {exposed:.3f} ms")
    lines[2:2] = _excluded_lines(result)
    if result.fabric_calibration is not None:
        from astra_adapter.fabric.calibrate import summary_lines

        lines[2:2] = summary_lines(result.fabric_calibration)  # type: ignore[arg-type]
    if result.best_of:
        lines.append("best iterations (fastest physically possible iteration of each op, fastest replay): " + ", ".join(
            f"{r.mode} {r.estimated_s * 1e3:.3f} vs {r.measured_s * 1e3:.3f} ms ({r.error_pct:+.2f}%)"
            for r in result.best_of)
            + (f"; {result.best_impossible} sweep iteration(s) faster than the links allow left out"
               if result.best_impossible else ""))
    if result.load_average:
        lines.append(f"load average (1 min) before/after: {result.load_average[0]:.2f}/{result.load_average[1]:.2f}"
                     f" on {os.cpu_count()} CPUs")
    from astra_adapter.fabric.experiment import SESSION_NOTE

    for est in result.estimates:
        lines += [f"# {est.mode.value}: {n}" for n in est.notes if n.startswith(SESSION_NOTE)]
        if est.slot_note:
            lines.append(f"# {est.mode.value}: {est.slot_note}")
        if est.draw_iterations_ns:
            lines.append(f"# {est.mode.value}: one testbed session draws one ECMP hash; over the model's "
                         f"{len(est.draw_iterations_ns)} draws the iteration spans "
                         f"{min(est.draw_iterations_ns) / 1e6:.1f}-{max(est.draw_iterations_ns) / 1e6:.1f} ms (sd "
                         f"{est.draw_spread_pct:.1f}%): the replay's {p.spec.rounds} round(s) sample that spread")
        if est.extrapolated:
            lines.append(f"# {est.mode.value}: {len(est.extrapolated)} op(s) timed by the calibrated model")
        if est.mode is EstimateMode.NCCL:  # a real cluster's calibration: which cluster, what was scaled
            lines += [f"# {est.mode.value}: {n}" for n in est.notes]
    lines.append(f"# results in {result.run_dir}")
    return "\n".join(lines)


def experiment_json(result: ExperimentResult) -> str:
    """experiment.json: what was compared, every replay iteration, and both comparisons."""
    p = result.prepared
    doc = {"experiment": p.spec.name, "source": p.spec.source, "workload": p.spec.workload.describe(),
           "topology": p.topology.name, "replay_iteration_ns": list(result.replay_iteration_ns),
           "accuracy": [{**r.__dict__, "error_pct": r.error_pct} for r in result.accuracy],
           "best_of": [{**r.__dict__, "error_pct": r.error_pct} for r in result.best_of],
           "load_average": list(result.load_average),
           **({"nccl_calibration": str(p.spec.nccl_calibration)} if p.spec.nccl_calibration else {})}
    return json.dumps(doc, indent=1) + "\n"
