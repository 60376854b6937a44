"""The types ``genie experiment``'s rows share (astra_adapter.experiment and the fabric and NCCL rows of
astra_adapter.fabric.experiment and astra_adapter.nccl.experiment): the prepared experiment, how iterations
become one number, and one row of the accuracy table. Below all three, so that each row imports them one way."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.topology import Topology
from genie.core.trace import Trace

from astra_adapter.experiment_spec import ExperimentSpec, SweepCase
from astra_adapter.mapping import TopologyMapping


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
    mapping: TopologyMapping | None  # None: ASTRA-sim's dimensions cannot express the topology (`unmapped` says why)
    sweep: tuple[SweepCase, ...]
    # the fabric model estimates it too: the topology is not an ASTRA-sim dimension stack, or the workload's
    # disjoint process groups share links there (fabric.estimate.groups_share_links), which ASTRA-sim's
    # congestion-unaware model cannot express, or a rank sends beside its collectives, which ASTRA-sim
    # serialises (fabric.estimate.sends_beside_collectives)
    fabric: bool = False
    unmapped: str = ""  # why there is no mapping (map_topology's refusal): no ASTRA-sim calibrated row
    warnings: tuple[str, ...] = ()  # the workload's (e.g. dependencies on missing nodes treated as met)


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
