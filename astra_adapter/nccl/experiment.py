"""A real cluster's NCCL calibration inside `genie experiment` (pure but for reading the calibration): the trace
estimated by the NCCL model on the experiment's topology (:func:`astra_adapter.nccl.estimate.estimate_nccl`),
beside the estimates calibrated on the testbed's own sweep, and compared with the same replay.

The row answers a different question from the others: not "does genie's model of its own testbed hold" but "how
far is the emulated replay from what NCCL on the calibrated cluster's hardware, at this topology's link rates,
would take". The estimate needs no measurement of the testbed, so it is made (and a bad calibration refused)
before anything is brought up.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median

from astra_adapter.experiment_types import AccuracyRow, PreparedExperiment, Statistic
from astra_adapter.nccl.calibration_io import load_calibration
from astra_adapter.nccl.estimate import NcclEstimate, estimate_nccl


def nccl_reference(prepared: PreparedExperiment, calibration: Path) -> tuple[NcclEstimate, Path]:
    """The trace's NCCL-model estimate on the experiment's topology, and the calibration file read."""
    cluster, params, file = load_calibration(calibration)
    return estimate_nccl(prepared.trace, prepared.topology, cluster, params,
                         source=str(prepared.spec.topology_path)), Path(file)


def nccl_row(prepared: PreparedExperiment, reference: NcclEstimate, replay_ns: tuple[int, ...],
             statistic: Statistic = Statistic.TYPICAL) -> AccuracyRow:
    """The NCCL model's iteration against the replay's median (or fastest) iteration."""
    measured_s = (median(replay_ns) if statistic is Statistic.TYPICAL else min(replay_ns)) / 1e9
    return AccuracyRow(prepared.spec.workload.describe(), prepared.topology.name, reference.estimate.mode.value,
                       reference.estimate.iteration_ns / 1e9, measured_s)
