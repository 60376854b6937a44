"""Per-iteration times and nccl-tests bandwidths from rank records (pure functions).

Iterations run back to back after a barrier, like nccl-tests' timed loop. Iteration i of a collective ends
when its last rank finishes it, so its time is ``max_r end[r][i] - max_r end[r][i-1]`` (for i = 0, the
reference is the last rank's start). The sum over iterations is exactly the wall time of the timed loop,
as nccl-tests measures it; the per-iteration values give the distribution (min, median, p99, max).

genie's one "time" is nccl-tests': the timed loop's wall time / iterations = the mean iteration time
(``time_us``). algbw = size / time; busbw = algbw x the collective's nccl-tests factor. The median and the
percentiles keep their own names (``time_median_us``, ``time_p99_us``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from genie.collectives.busbw import busbw_factor
from genie.core.collective import Algorithm, Collective


@dataclass(frozen=True)
class CaseStats:
    collective: Collective
    algorithm: Algorithm
    ranks: int
    size_bytes: int
    dtype_bytes: int
    iterations: int
    time_us: float  # nccl-tests' time: the mean iteration time (loop wall time / iterations)
    time_min_us: float
    time_median_us: float
    time_p99_us: float
    time_max_us: float
    algbw_GBps: float
    busbw_GBps: float
    iteration_ns: tuple[int, ...] = ()  # every timed iteration, in order
    #: each rank's share of every iteration (rank order; metrics.rank_iteration_times_ns): per-process times
    rank_iteration_ns: tuple[tuple[int, ...], ...] = ()

    @property
    def count(self) -> int:
        return self.size_bytes // self.dtype_bytes


def iteration_times_ns(per_rank: Mapping[int, Sequence[Sequence[int]]], restarts: Sequence[int] = ()) -> list[int]:
    """Per-rank [(start_ns, end_ns), ...] for the same iterations → each iteration's time in ns. Iterations in
    `restarts` followed a pause (a fault point's barrier) and are timed from the last rank's start, like the
    first, instead of from the previous iteration's end."""
    per = rank_iteration_times_ns(per_rank, restarts)
    return [max(column) for column in zip(*per)] if per else []


def rank_iteration_times_ns(per_rank: Mapping[int, Sequence[Sequence[int]]],
                            restarts: Sequence[int] = ()) -> list[list[int]]:
    """Each rank's share of every iteration (rank order): from the iteration's reference (the previous
    iteration's last end; the last rank's start for the first and restarted ones) to this rank's end, at least
    0. The slowest rank's value is the iteration's time, as nccl-tests' per-process rows whose max is the
    iteration time."""
    runs = [list(per_rank[r]) for r in sorted(per_rank) if len(per_rank[r])]
    if not runs:
        return []
    n = len(runs[0])
    if any(len(r) != n for r in runs):
        raise ValueError("ranks reported different iteration counts")
    starts = np.array([[it[0] for it in r] for r in runs], dtype=np.int64)
    ends = np.array([[it[1] for it in r] for r in runs], dtype=np.int64)
    last_end = ends.max(axis=0)
    previous = np.concatenate(([starts[:, 0].max()], last_end[:-1]))
    for i in restarts:
        if 0 <= i < n:
            previous[i] = starts[:, i].max()
    return [[int(t) for t in row] for row in np.maximum(ends - previous, 0)]


def case_stats(collective: Collective, algorithm: Algorithm, ranks: int, size_bytes: int, dtype_bytes: int,
               times_ns: Sequence[int], rank_times_ns: Sequence[Sequence[int]] = ()) -> CaseStats:
    t_us = np.asarray(times_ns, dtype=np.float64) / 1e3
    mean_us = float(t_us.mean())
    algbw = size_bytes / (mean_us * 1e3) if mean_us > 0 else 0.0  # bytes per ns == GB/s
    return CaseStats(collective=collective, algorithm=algorithm, ranks=ranks, size_bytes=size_bytes,
                     dtype_bytes=dtype_bytes, iterations=len(t_us), time_us=mean_us, time_min_us=float(t_us.min()),
                     time_median_us=float(np.median(t_us)), time_p99_us=float(np.percentile(t_us, 99)),
                     time_max_us=float(t_us.max()), algbw_GBps=algbw,
                     busbw_GBps=algbw * busbw_factor(collective, ranks),
                     iteration_ns=tuple(int(t) for t in times_ns),
                     rank_iteration_ns=tuple(tuple(int(t) for t in r) for r in rank_times_ns))



def rank_memory_summary(peak_rss_kb: Mapping[int, int]) -> dict[str, dict[str, float]]:
    """The ranks' peak resident memory for a run's manifest: ``{"rank_peak_rss_mb": {ranks, median, max,
    total}}`` (empty when no rank reported it: MPI-launched ranks)."""
    if not peak_rss_kb:
        return {}
    mb = sorted(kb / 1024 for kb in peak_rss_kb.values())
    return {"rank_peak_rss_mb": {"ranks": len(mb), "median": round(mb[len(mb) // 2], 1), "max": round(mb[-1], 1),
                                 "total": round(sum(mb), 1)}}
