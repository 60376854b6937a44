"""The ranks' CPU: how long each rank process ran and how long it waited, runnable, for a CPU, per case.

A rank that is runnable but not running cannot hand its link the next step's data: on a host with more rank
processes than cores, shared with other work, that wait is part of every measured time (an 8-rank 64 MiB ring
all-reduce on the 2-core VM measured slow steps whose sending rank had waited 171 ms for a CPU on average,
against 48 ms for the steps at the line rate; benchmarks/README.md, "Slow iterations"). Linux keeps both
figures per task in ``/proc/<pid>/schedstat``: time on a CPU, time waiting on a run queue (ns), and the
number of time slices. Pure: the reading is the caller's (`genie.services.cases`).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Mapping, Sequence

#: a median rank waiting this share of the wall time for a CPU makes the run's times CPU-bound (a note says so)
STARVED_WAIT_FRACTION = 0.05


@dataclass(frozen=True)
class SchedCounters:
    """One task's cumulative ``/proc/<pid>/schedstat``: on a CPU, runnable but waiting (ns), time slices."""

    cpu_ns: int
    wait_ns: int
    slices: int


def parse_schedstat(text: str) -> SchedCounters:
    """``/proc/<pid>/schedstat``'s three numbers; ValueError when it does not hold them."""
    fields = text.split()
    if len(fields) < 3:
        raise ValueError(f"schedstat: expected 3 numbers, got {text!r}")
    return SchedCounters(int(fields[0]), int(fields[1]), int(fields[2]))


@dataclass(frozen=True)
class RankCpu:
    """What one rank's process did during a case: ran `cpu_ns`, waited runnable `wait_ns`."""

    rank: int
    cpu_ns: int
    wait_ns: int


@dataclass(frozen=True)
class CaseCpu:
    """The ranks' CPU over one case's timed iterations: from every rank waiting at the barrier before the first
    to every rank waiting at the barrier after the last, `wall_ns` long as the orchestrator saw it (the ranks'
    start-up, warmup and check iterations are outside it, as they are outside the times measured)."""

    case: int
    size_bytes: int
    wall_ns: int
    ranks: tuple[RankCpu, ...]

    def wait_fractions(self) -> list[float]:
        """Each rank's runnable-but-waiting time over the wall time, ascending."""
        if self.wall_ns <= 0:
            return []
        return sorted(r.wait_ns / self.wall_ns for r in self.ranks)

    @property
    def median_wait_fraction(self) -> float | None:
        f = self.wait_fractions()
        return f[len(f) // 2] if f else None


def case_cpu(case: int, size_bytes: int, wall_ns: int, before: Mapping[int, SchedCounters],
             after: Mapping[int, SchedCounters]) -> CaseCpu:
    """The per-rank differences between two readings (ranks read both times only; counters never go back)."""
    ranks = tuple(RankCpu(rank, max(0, after[rank].cpu_ns - b.cpu_ns), max(0, after[rank].wait_ns - b.wait_ns))
                  for rank, b in sorted(before.items()) if rank in after)
    return CaseCpu(case, size_bytes, wall_ns, ranks)


def rank_cpu_csv(cases: Sequence[CaseCpu]) -> str:
    """``rank_cpu.csv``: one row per case and rank (times in ms, ``wait_pct`` of the case's wall time)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["case", "size_bytes", "rank", "wall_ms", "cpu_ms", "wait_ms", "wait_pct"])
    for c in cases:
        for r in c.ranks:
            pct = 100.0 * r.wait_ns / c.wall_ns if c.wall_ns > 0 else 0.0
            w.writerow([c.case, c.size_bytes, r.rank, f"{c.wall_ns / 1e6:.3f}", f"{r.cpu_ns / 1e6:.3f}",
                        f"{r.wait_ns / 1e6:.3f}", f"{pct:.2f}"])
    return out.getvalue()


def rank_cpu_summary(cases: Sequence[CaseCpu]) -> dict[str, dict[str, float]]:
    """For a run's manifest: ``{"rank_cpu_wait_pct": {cases, median, max}}`` — per case the median rank's
    share of the wall time spent runnable but waiting for a CPU; the median and the largest over the cases.
    Empty without readings (ranks on other hosts, or a kernel without schedstats)."""
    fractions = sorted(f for c in cases if (f := c.median_wait_fraction) is not None)
    if not fractions:
        return {}
    return {"rank_cpu_wait_pct": {"cases": len(fractions), "median": round(100 * fractions[len(fractions) // 2], 1),
                                  "max": round(100 * fractions[-1], 1)}}


def starved_note(cases: Sequence[CaseCpu]) -> str | None:
    """One line when the ranks waited for a CPU enough to be part of the times measured (None otherwise)."""
    worst = max(((f, c) for c in cases if (f := c.median_wait_fraction) is not None), default=None,
                key=lambda x: x[0])
    if worst is None or worst[0] < STARVED_WAIT_FRACTION:
        return None
    return (f"ranks waited for a CPU {100 * worst[0]:.0f}% of the time (median rank, {worst[1].size_bytes} B): "
            "the times include CPU starvation, not only the network (rank_cpu.csv)")
