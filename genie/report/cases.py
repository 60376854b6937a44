"""What identifies a measured case and a curve in a run directory, and a case's iteration spread (pure).

A *case* is one row of a sweep: (collective, algorithm, group size, size). A *curve* is what a busbw plot draws
as one line: one collective on one group size - never two group sizes in one line (a 2-rank and a 4-rank
all-reduce are different curves). When a curve would hold the same size twice (two algorithms pinned for the
same collective and group size), it is split by algorithm.

A case's *spread* is the range its iterations covered, min..p99 (p99 rather than max, so that one stall does
not widen it), taken from the per-iteration times when the run has them, else from the min/p99 columns of its
summary; the same statistic either way, so runs with and without per-iteration times compare fairly.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Sequence

import numpy as np

from genie.report.sweep import SweepRow


@dataclass(frozen=True, order=True)
class CaseKey:
    collective: str
    ranks: int  # group size
    algorithm: str
    size_bytes: int

    @classmethod
    def of(cls, row: SweepRow) -> CaseKey:
        return cls(row.collective, row.ranks, row.algorithm, row.size_bytes)


@dataclass(frozen=True, order=True)
class CurveKey:
    collective: str
    ranks: int  # group size
    algorithm: str = ""  # only when the curve had to be split by algorithm

    @property
    def label(self) -> str:
        return f"{self.collective}, {self.ranks} ranks" + (f", {self.algorithm}" if self.algorithm else "")


def sweep_curves(rows: Iterable[SweepRow]) -> dict[CurveKey, list[SweepRow]]:
    """The sweep's rows as curves, each sorted by size, in the order the curves first appear."""
    by_group: dict[tuple[str, int], list[SweepRow]] = {}
    for r in rows:
        by_group.setdefault((r.collective, r.ranks), []).append(r)
    curves: dict[CurveKey, list[SweepRow]] = {}
    for (collective, ranks), mine in by_group.items():
        sizes = [r.size_bytes for r in mine]
        split = len(set(sizes)) != len(sizes)
        for r in mine:
            curves.setdefault(CurveKey(collective, ranks, r.algorithm if split else ""), []).append(r)
    return {k: sorted(v, key=lambda r: r.size_bytes) for k, v in curves.items()}


class SpreadSource(Enum):
    ITERATIONS = "iterations"  # computed from every per-iteration time
    SUMMARY = "summary"  # the min and p99 columns of a summary (sweep.csv / sweep.json's per-size stats)


@dataclass(frozen=True)
class Spread:
    """The range a case's iterations covered (see the module doc); `where` names the file it came from."""

    min_us: float
    median_us: float
    p99_us: float
    source: SpreadSource
    where: str
    iterations: int = 0

    def describe(self) -> str:
        if self.source is SpreadSource.ITERATIONS:
            return f"per-iteration times ({self.where})"
        return f"min/p99 columns ({self.where})"


def spread_of(times_us: Sequence[float], where: str) -> Spread:
    """min, median and p99 (numpy's linear percentile, as genie's bench statistics) of per-iteration times."""
    a = np.asarray(times_us, dtype=np.float64)
    return Spread(float(a.min()), float(np.median(a)), float(np.percentile(a, 99)), SpreadSource.ITERATIONS, where,
                  len(a))


def summary_spread(row: SweepRow, where: str) -> Spread:
    return Spread(row.time_min_us, row.time_median_us, row.time_p99_us, SpreadSource.SUMMARY, where, row.iterations)


def percentiles_us(times_us: Sequence[float]) -> dict[str, float]:
    """The per-iteration table's statistics of one case."""
    a = np.asarray(times_us, dtype=np.float64)
    p25, p50, p75, p99 = np.percentile(a, [25, 50, 75, 99])
    return {"min_us": float(a.min()), "p25_us": float(p25), "median_us": float(p50), "p75_us": float(p75),
            "p99_us": float(p99), "max_us": float(a.max()), "mean_us": float(a.mean())}
