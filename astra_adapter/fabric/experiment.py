"""``genie experiment``'s fabric row (pure): on a topology that needs the fabric model
(:func:`astra_adapter.fabric.estimate.needs_fabric`), calibrate it per link class on the sweep and estimate the
trace with it, beside the measured and ASTRA-sim calibrated modes."""

from __future__ import annotations

from statistics import median

from astra_adapter.experiment import AccuracyRow, PreparedExperiment, Statistic
from astra_adapter.fabric.calibrate import FabricCalibration, calibrate_fabric
from astra_adapter.fabric.estimate import estimate_fabric
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.measurements import Measurement
from astra_adapter.workload_estimate import TraceEstimate


def evaluate_fabric(prepared: PreparedExperiment, measurements: tuple[Measurement, ...], replay_ns: tuple[int, ...],
                    statistic: Statistic = Statistic.TYPICAL) -> tuple[FabricCalibration, TraceEstimate, AccuracyRow]:
    source = str(prepared.spec.topology_path)
    cal = calibrate_fabric(measurements, FabricNetwork(prepared.topology, source=source))
    est = estimate_fabric(prepared.trace, prepared.topology, cal.params, source=source, notes=cal.warnings())
    measured_s = (median(replay_ns) if statistic is Statistic.TYPICAL else min(replay_ns)) / 1e9
    row = AccuracyRow(prepared.spec.workload.describe(), prepared.topology.name, est.mode.value,
                      est.iteration_ns / 1e9, measured_s)
    return cal, est, row
