"""What a replay measured (pure data): per iteration, each rank's node timestamps, and the whole outcome."""

from __future__ import annotations

from dataclasses import dataclass

from genie.core.flowpath import FlowTuple
from genie.core.placement import RankPlacement
from genie.core.program import RankProgram


@dataclass(frozen=True)
class RankRecords:
    rank: int
    t0_ns: int
    records: tuple[tuple[int, int, int], ...]  # (node id, start_ns, end_ns), monotonic


@dataclass(frozen=True)
class IterationRecords:
    iteration: int
    ranks: tuple[RankRecords, ...]

    @property
    def start_ns(self) -> int:
        return min(r.t0_ns for r in self.ranks)


@dataclass(frozen=True)
class ReplayOutcome:
    """A replay's programs (one per rank), its timed iterations' records and where each rank ran."""

    programs: tuple[RankProgram, ...]
    iterations: tuple[IterationRecords, ...]
    placements: tuple[RankPlacement, ...]
    peak_rss_kb: tuple[tuple[int, int], ...] = ()  # (rank, its process's peak resident memory), local ranks
    flows: tuple[FlowTuple, ...] = ()  # every rank's sending connections (genie.core.flowpath)
