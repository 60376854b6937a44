"""What made a bench run's slow iterations slow (issue #36 item 3; reads run directories, needs no root):

    python -m benchmarks.iteration_spread RUN_DIR [RUN_DIR ...] [--within 0.05]

Per case of each run's sweep.json (`iteration_us`, timed as genie/measure/metrics.py: an iteration ends when its
last rank ends it and is timed from the previous iteration's last end):
- how many iterations are within `--within` of the median, and whether the first and the last one are misses;
- the first iteration against the median: it is timed from the last rank's start, and on a host with more
  ranks than cores the ranks leave the start barrier up to milliseconds apart, the first of them already sending;
- the last iteration against the median: iterations run back to back, so an iteration's tail shares the links
  with the next one's head, except the last's: a short last iteration measures that overlap, the ranks' skew;
- the lag-1 autocorrelation of the iterations: negative when a late end lengthens one iteration and shortens
  the next (timed from that late end while the other ranks had already started), and how many means of two
  consecutive iterations are within `--within` of the median (such pairs cancel);
from the run's nccl-tests JSON (every bench run writes each rank's share of every iteration,
`per_process_max_times_us`): the last rank's lateness against the median rank, median and p90;
with `--steps` in the run (steps.csv), per case:
- the correlation of an iteration's excess with how late its last rank ended against the median rank, and the
  median and p90 of that lateness and of the spread of the ranks' starts.

benchmarks/README.md "What made each slow all-to-all iteration slow" and "What the late rank of an all-to-all waits
for" have its findings for star-8.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from genie.core.collective import Collective
from genie.measure.metrics import iteration_times_ns
from genie.report import nccl_json


@dataclass(frozen=True)
class IterationSpread:
    iterations: int
    within: int  # iterations within the tolerance of the median
    misses_before_last: int  # iterations outside the tolerance, the last one not counted
    last_over_median: float
    first_over_median: float
    lag1_autocorrelation: float  # nan for fewer than 3 iterations or constant times
    pairs_within: int  # means of consecutive iterations within the tolerance of the median
    pairs: int


@dataclass(frozen=True)
class RankLateness:
    excess_vs_lateness: float  # correlation of (iteration / median - 1) with its last rank's lateness
    lateness_p50_ms: float
    lateness_p90_ms: float
    start_spread_p50_ms: float


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def iteration_spread(times: Sequence[float], tolerance: float = 0.05) -> IterationSpread:
    """`times`: one case's iteration times in order (any unit)."""
    t = np.asarray(times, dtype=np.float64)
    if len(t) == 0:
        raise ValueError("no iterations")
    median = float(np.median(t))
    close = np.abs(t / median - 1) <= tolerance
    pair_means = (t[:-1] + t[1:]) / 2
    x = t / median - 1
    return IterationSpread(iterations=len(t), within=int(close.sum()),
                           misses_before_last=int((~close[:-1]).sum()),
                           last_over_median=float(t[-1] / median), first_over_median=float(t[0] / median),
                           lag1_autocorrelation=_correlation(x[:-1], x[1:]),
                           pairs_within=int((np.abs(pair_means / median - 1) <= tolerance).sum()),
                           pairs=len(pair_means))


def rank_lateness(starts_ns: np.ndarray, ends_ns: np.ndarray) -> RankLateness:
    """`starts_ns`, `ends_ns`: [rank, iteration] of one case's timed iterations (steps.csv). An iteration's
    time follows genie/measure/metrics.py; its last rank's lateness is its end minus the median rank's end."""
    last = ends_ns.max(axis=0)
    t = np.asarray(iteration_times_ns({r: list(zip(starts_ns[r], ends_ns[r])) for r in range(len(starts_ns))}),
                   dtype=np.float64)  # one rule: the timing bench reports
    excess = t / np.median(t) - 1
    lateness_ms = (last - np.median(ends_ns, axis=0)) / 1e6
    start_spread_ms = (starts_ns.max(axis=0) - starts_ns.min(axis=0)) / 1e6
    return RankLateness(excess_vs_lateness=_correlation(excess, lateness_ms),
                        lateness_p50_ms=float(np.median(lateness_ms)),
                        lateness_p90_ms=float(np.percentile(lateness_ms, 90)),
                        start_spread_p50_ms=float(np.median(start_spread_ms)))


def share_lateness_ms(per_process_us: Sequence[Sequence[float]]) -> tuple[float, float]:
    """[rank][iteration] shares of each iteration (nccl-tests JSON's `per_process_max_times_us`: each rank's end
    minus the iteration's common reference) -> the last rank's lateness against the median rank, p50 and p90 (ms)."""
    shares = np.asarray(per_process_us, dtype=np.float64)
    if shares.ndim != 2 or shares.size == 0:
        raise ValueError("no per-process iteration times")
    lateness_ms = (shares.max(axis=0) - np.median(shares, axis=0)) / 1e3
    return float(np.median(lateness_ms)), float(np.percentile(lateness_ms, 90))


def nccl_shares(run: Path) -> dict[tuple[str, int], list[list[float]]]:
    """{(nccl-tests binary stem, size B): per-process shares} from the run's nccl_*_perf.json files (out of place)."""
    out = {}
    for path in sorted(run.glob("nccl_*_perf.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        stem = path.name.removeprefix("nccl_").removesuffix("_perf.json")
        for r in doc.get("results", []):
            shares = (r.get("out_of_place_per_iter") or {}).get("per_process_max_times_us")
            if shares:
                out[(stem, int(r["size"]))] = shares
    return out


def steps_by_case(rows: Iterable[dict]) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """steps.csv rows -> {(collective, size_bytes): (starts_ns, ends_ns)} as [rank, iteration]: an iteration of a
    rank spans its first step's start to its last step's end."""
    spans: dict[tuple[str, int], dict[tuple[int, int], list[int]]] = {}
    for row in rows:
        key = (row["collective"], int(row["size_bytes"]))
        it, rank, start, end = int(row["iteration"]), int(row["rank"]), int(row["start_ns"]), int(row["end_ns"])
        span = spans.setdefault(key, {}).setdefault((rank, it), [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
    out = {}
    for key, per in spans.items():
        ranks = sorted({r for r, _ in per})
        iterations = sorted({i for _, i in per})
        starts = np.array([[per[(r, i)][0] for i in iterations] for r in ranks], dtype=np.int64)
        ends = np.array([[per[(r, i)][1] for i in iterations] for r in ranks], dtype=np.int64)
        out[key] = (starts, ends)
    return out


def report(run: Path, tolerance: float) -> list[str]:
    lines = []
    try:
        results = json.loads((run / "sweep.json").read_text())["results"]
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"{run / 'sweep.json'}: cannot read the results ({exc})")
    steps = {}
    if (run / "steps.csv").exists():
        with open(run / "steps.csv", newline="") as f:
            steps = steps_by_case(csv.DictReader(f))
    shares = nccl_shares(run)
    for r in results:
        times = r.get("iteration_us") or []
        if not times:
            continue
        s = iteration_spread(times, tolerance)
        last = "the last one of the misses" if s.iterations - s.within > s.misses_before_last else "the last within"
        first = "a miss" if abs(s.first_over_median - 1) > tolerance else "within"
        line = (f"{run.name} {r['collective']} {r['size_bytes']} B: within {tolerance:.0%} {s.within}/{s.iterations} "
                f"({last}), first/median {s.first_over_median:.2f} ({first}), last/median {s.last_over_median:.2f}, "
                f"lag-1 autocorrelation {s.lag1_autocorrelation:+.2f}, pairs within {s.pairs_within}/{s.pairs}")
        stem = nccl_json.BINARIES[Collective(r["collective"])].removesuffix("_perf")
        case_shares = shares.get((stem, int(r["size_bytes"])))
        if case_shares is not None and len(case_shares[0]) == len(times):
            p50, p90 = share_lateness_ms(case_shares)
            line += f"; last rank's lateness p50/p90 {p50:.2f}/{p90:.2f} ms"
        case = steps.get((r["collective"], int(r["size_bytes"])))
        if case is not None and case[0].shape[1] == len(times):
            late = rank_lateness(*case)
            line += (f"; excess vs last rank's lateness {late.excess_vs_lateness:+.2f}, lateness p50/p90 "
                     f"{late.lateness_p50_ms:.2f}/{late.lateness_p90_ms:.2f} ms, start spread p50 "
                     f"{late.start_spread_p50_ms:.2f} ms")
        lines.append(line)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.iteration_spread", description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="bench run directories")
    parser.add_argument("--within", type=float, default=0.05, help="tolerance around the median (default 0.05)")
    args = parser.parse_args(argv)
    for run in args.runs:
        print("\n".join(report(run, args.within)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
