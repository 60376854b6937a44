"""The estimate loop: a trace's iteration time from measurements, in two modes (``genie estimate``).

- **measured**: every communication node takes the measured latency of its (collective, algorithm, group size),
  interpolated log-log in size between measured sizes (:class:`~astra_adapter.measurements.MeasurementTable`),
  and the trace is played under the replay's rules (:mod:`astra_adapter.timeline`). Nothing is extrapolated:
  ops outside the measured range are an error listing them, unless ``extrapolate``, which times those ops
  (only those) with the calibrated model.
- **calibrated**: the whole trace goes through the built-in estimator (ASTRA-sim's semantics: one collective in
  flight per NPU, a process group smaller than the world is a ring) on the topology's ASTRA-sim dimensions with
  the fitted bandwidth, latency and endpoint delay, and the collectives' sizes scaled by the fitted size factors
  - for what-if questions at other sizes, scales and topologies.

Per rank: iteration time, compute, communication (time with any communication in flight), exposed
communication (iteration - compute) and overlap; ``estimate.csv`` is written atomically.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable

from genie.core.errors import InputError
from genie.core.files import write_atomic
from genie.core.topology import Topology
from genie.core.trace import Trace

from astra_adapter.calibrate import Calibration, calibrate, calibrated_network, calibration_mapping, op_time_ns, \
    scaled_op, scaled_trace
from astra_adapter.calibration_io import CALIBRATION_JSON, load_calibration
from astra_adapter.estimate import estimate
from astra_adapter.export import even_all_to_alls, system_config
from astra_adapter.fabric.calibrate import lower_bounds_us
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.mapping import TopologyMapping
from astra_adapter.measurements import CommOp, Measurement, MeasurementTable, describe_missing, \
    read_measurements, trace_comm_ops, workload_weights
from astra_adapter.slot_holds import SlotHold
from astra_adapter.timeline import RankTimes, play_trace

ESTIMATE_COLUMNS = ("mode", "rank", "iteration_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "overlap_ns")


class EstimateMode(Enum):
    MEASURED = "measured"
    CALIBRATED = "calibrated"
    FABRIC = "fabric"  # the genie-native fabric model (astra_adapter.fabric) on the topology file itself
    NCCL = "nccl"  # NCCL's tuner and a real cluster's calibration (astra_adapter.nccl, genie calibrate)

    @classmethod
    def parse(cls, text: str) -> "EstimateMode":
        for mode in cls:
            if mode.value == text.strip().lower():
                return mode
        raise InputError(f"unknown mode {text!r} (expected measured, calibrated, fabric or nccl)", path="mode")


@dataclass(frozen=True)
class TraceEstimate:
    mode: EstimateMode
    ranks: tuple[RankTimes, ...]
    extrapolated: tuple[CommOp, ...] = ()  # measured mode: ops timed by the calibrated model
    notes: tuple[str, ...] = ()
    #: fabric mode with ECMP: the iteration of each hash draw (or of each session, on the paths it took)
    draw_iterations_ns: tuple[int, ...] = ()
    #: calibrated mode: where ASTRA-sim's one communication slot per NPU held a send or collective back for at
    #: least SLOT_NOTE_MIN_PCT of the iteration, which the replay would have run at once ("" if nowhere)
    slot_note: str = ""

    @property
    def iteration_ns(self) -> int:
        return max((r.iteration_ns for r in self.ranks), default=0)

    @property
    def draw_spread_pct(self) -> float:
        """The standard deviation of the draws' iterations, in % of their mean: how far one testbed session (one
        draw of the ECMP hash) typically lands from the expectation (0: no draws)."""
        d = self.draw_iterations_ns
        if len(d) < 2:
            return 0.0
        mean = sum(d) / len(d)
        return (sum((x - mean) ** 2 for x in d) / len(d)) ** 0.5 / mean * 100 if mean else 0.0


def model_timer(mapping: TopologyMapping, calibration: Calibration):
    """CommOp -> ns with the calibrated model (cached per op)."""
    network, _ = calibrated_network(mapping, calibration)
    params = calibration.system_params()
    cache: dict[CommOp, int] = {}

    def timer(op: CommOp) -> int:
        if op not in cache:
            cache[op] = op_time_ns(scaled_op(op, calibration.size_factor(op.collective)), mapping, network, params)
        return cache[op]

    return timer


def estimate_measured(trace: Trace, table: MeasurementTable, *,
                      extrapolate_with: Callable[[], Callable[[CommOp], int]] | None = None,
                      share_nic: bool = True) -> TraceEstimate:
    """Measured mode (see the module doc). ``extrapolate_with`` makes the calibrated model's timer (called only
    when some op is outside the measurements); None: such ops are an error listing them."""
    ops = trace_comm_ops(trace)
    missing = table.missing(ops)
    notes = []
    uneven = sum(1 for op in ops if op.split_bytes)
    if uneven:
        notes.append(f"{uneven} uneven all-to-all(s) timed as the even all-to-all of their busiest member (the "
                     "measurements are of even all-to-alls): the busiest member's time, an upper bound")
    timer = None
    if missing:
        if extrapolate_with is None:
            raise InputError(describe_missing(missing, table))
        timer = extrapolate_with()
        notes.append(f"{len(missing)} op(s) outside the measurements timed by the calibrated model")
    missing_set = set(missing)

    def duration_ns(op: CommOp) -> float:
        if op in missing_set:
            return float(timer(op))  # type: ignore[misc]
        return table.time_us(op) * 1000.0  # type: ignore[operator]

    timeline = play_trace(trace, duration_ns, share_nic=share_nic)
    return TraceEstimate(EstimateMode.MEASURED, timeline.ranks, tuple(missing), tuple(notes))


def estimate_calibrated(trace: Trace, mapping: TopologyMapping, calibration: Calibration) -> TraceEstimate:
    """Calibrated mode: the built-in estimator with the fitted network on ``mapping``."""
    if trace.num_ranks != mapping.npus_count:
        raise InputError(f"the trace has {trace.num_ranks} ranks but {mapping.topology_name} maps to "
                         f"{mapping.npus_count} NPUs", path="topology")
    network, notes = calibrated_network(mapping, calibration)
    system, more = system_config(mapping, calibration.system_params(), trace)
    astra_trace, uneven = even_all_to_alls(trace)  # ASTRA-sim's semantics: what the export writes
    est = estimate(scaled_trace(astra_trace, calibration), system, network, holds=True)
    ranks = []
    for r in est.result.by_rank():
        compute = r.finish_cycles - r.exposed_comm_cycles
        ranks.append(RankTimes(r.rank, r.finish_cycles, compute, r.comm_time, r.exposed_comm_cycles, r.overlap))
    iteration = max((r.iteration_ns for r in ranks), default=0)
    return TraceEstimate(EstimateMode.CALIBRATED, tuple(ranks), (), (*notes, *more, *uneven),
                         slot_note=slot_hold_note(trace, est.slot_hold, iteration))


SLOT_NOTE_MIN_PCT = 5.0  # below this the two rules mostly differ in who waits, not in the iteration


def slot_hold_note(trace: Trace, hold: SlotHold | None, iteration_ns: int) -> str:
    """One line on the longest slot hold, when it is at least SLOT_NOTE_MIN_PCT of the iteration."""
    if hold is None or not iteration_ns or hold.held_ns * 100 < SLOT_NOTE_MIN_PCT * iteration_ns:
        return ""
    nodes = trace.ranks[hold.rank].nodes
    behind = f" behind {nodes[hold.behind_index].name!r}" if hold.behind_index >= 0 else ""
    return (f"ASTRA-sim runs one communication op at a time per NPU (collectives and sends): rank {hold.rank}'s "
            f"{nodes[hold.node_index].name!r} waited {hold.held_ns / 1e6:.1f} ms "
            f"({hold.held_ns / iteration_ns * 100:.0f}% of the iteration){behind}; the replay runs them at once, "
            "so this row is ASTRA-sim's answer and the measured (and fabric) rows the testbed's")


def calibration_for(run_dirs, measurements: tuple[Measurement, ...], mapping: TopologyMapping | None,
                    topology: Topology | None = None, trace: Trace | None = None
                    ) -> tuple[Calibration, TopologyMapping]:
    """(calibration, the mapping to estimate on). A ``calibration.json`` in a run
    directory is used as it is (on ``mapping`` if given, else on the dimensions it was fitted on); otherwise
    the measurements are fitted on ``mapping`` (they are taken to come from that topology), without those
    faster than ``topology``'s links allow (:func:`astra_adapter.fabric.calibrate.lower_bounds_us`), weighted
    by ``trace``'s time (:func:`astra_adapter.measurements.workload_weights`) when given."""
    for entry in run_dirs:
        path = Path(entry)
        if (path / CALIBRATION_JSON).is_file():
            cal = load_calibration(path)
            return cal, mapping or calibration_mapping(cal)
    if mapping is None:
        raise InputError("calibrating needs the topology the measurements were taken on (`topology` FILE), or a "
                         "run directory with calibration.json", path="topology")
    bounds = None if topology is None else lower_bounds_us(measurements, FabricNetwork(topology))
    weights = None if trace is None else workload_weights(trace, measurements)
    return calibrate(measurements, mapping, bounds_us=bounds, weights=weights), mapping


def estimate_from_runs(trace: Trace, run_dirs, mode: EstimateMode, *, mapping: TopologyMapping | None = None,
                       topology: Topology | None = None, extrapolate: bool = False,
                       share_nic: bool = True) -> tuple[TraceEstimate, Calibration | None]:
    """``genie estimate``: the trace estimated from bench/experiment run directories (the calibration, when one
    was needed, is returned so that a fitted one can be saved)."""
    measurements = read_measurements(run_dirs)
    if mode is EstimateMode.CALIBRATED:
        cal, target = calibration_for(run_dirs, measurements, mapping, topology, trace)
        return estimate_calibrated(trace, target, cal), cal
    used: list[Calibration] = []

    def extrapolator() -> Callable[[CommOp], int]:
        cal, target = calibration_for(run_dirs, measurements, mapping, topology, trace)
        used.append(cal)
        return model_timer(target, cal)

    est = estimate_measured(trace, MeasurementTable(measurements), extrapolate_with=extrapolator if extrapolate else None,
                            share_nic=share_nic)
    return est, (used[0] if used else None)


# ---- reporting ----------------------------------------------------------------------------------------
def estimate_csv(est: TraceEstimate) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(ESTIMATE_COLUMNS)
    for r in est.ranks:
        writer.writerow((est.mode.value, r.rank, r.iteration_ns, r.compute_ns, r.comm_ns, r.exposed_comm_ns,
                         r.overlap_ns))
    return out.getvalue()


def write_estimate(est: TraceEstimate, out_dir: str | Path, name: str = "estimate.csv") -> Path:
    return write_atomic(Path(out_dir) / name, estimate_csv(est).encode())


def format_estimate(est: TraceEstimate) -> str:
    lines = [f"# {est.mode.value} estimate: iteration {est.iteration_ns / 1e6:.3f} ms",
             f"{'rank':>5} {'iteration_ms':>13} {'compute_ms':>11} {'comm_ms':>10} {'exposed_ms':>11} "
             f"{'overlap_ms':>11}"]
    for r in est.ranks:
        lines.append(f"{r.rank:>5} {r.iteration_ns / 1e6:>13.3f} {r.compute_ns / 1e6:>11.3f} {r.comm_ns / 1e6:>10.3f} "
                     f"{r.exposed_comm_ns / 1e6:>11.3f} {r.overlap_ns / 1e6:>11.3f}")
    lines += [f"# note: {n}" for n in (*est.notes, est.slot_note) if n]
    return "\n".join(lines)
