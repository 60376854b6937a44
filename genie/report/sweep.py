"""The sweep report: nccl-tests-style table, sweep.csv and sweep.json."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Sequence

from genie.measure.metrics import CaseStats
from genie.report.rundir import write_atomic

SWEEP_COLUMNS = ("collective", "algorithm", "ranks", "size_bytes", "count", "dtype", "iterations",
                 "time_min_us", "time_median_us", "time_p99_us", "time_max_us", "algbw_GBps", "busbw_GBps")

_DTYPE_NAMES = {1: "int8", 2: "half", 4: "float", 8: "double"}


def _row(s: CaseStats) -> dict[str, object]:
    return {"collective": s.collective.value, "algorithm": s.algorithm.value, "ranks": s.ranks,
            "size_bytes": s.size_bytes, "count": s.count, "dtype": _DTYPE_NAMES.get(s.dtype_bytes, "bytes"),
            "iterations": s.iterations, "time_min_us": round(s.time_min_us, 3),
            "time_median_us": round(s.time_median_us, 3), "time_p99_us": round(s.time_p99_us, 3),
            "time_max_us": round(s.time_max_us, 3), "algbw_GBps": round(s.algbw_GBps, 6),
            "busbw_GBps": round(s.busbw_GBps, 6)}


def sweep_csv(stats: Sequence[CaseStats]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=SWEEP_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for s in stats:
        writer.writerow(_row(s))
    return out.getvalue()


def sweep_json(stats: Sequence[CaseStats], meta: dict[str, object] | None = None) -> str:
    return json.dumps({"meta": meta or {}, "results": [_row(s) for s in stats]}, indent=2) + "\n"


def write_sweep(run_dir: Path, stats: Sequence[CaseStats], meta: dict[str, object] | None = None) -> None:
    write_atomic(Path(run_dir) / "sweep.csv", sweep_csv(stats))
    write_atomic(Path(run_dir) / "sweep.json", sweep_json(stats, meta))


def format_table(stats: Sequence[CaseStats]) -> str:
    """nccl-tests' layout: one block per collective, one line per size."""
    lines: list[str] = []
    header = (f"#{'size':>12} {'count':>12} {'type':>6} {'algorithm':>18} "
              f"{'time':>10} {'algbw':>8} {'busbw':>8} {'p99':>10}")
    units = f"#{'(B)':>12} {'(elements)':>12} {'':>6} {'':>18} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'(us)':>10}"
    current = None
    for s in stats:
        key = (s.collective, s.ranks)
        if key != current:
            if lines:
                lines.append("")
            lines.append(f"# {s.collective.value}, {s.ranks} ranks")
            lines += [header, units]
            current = key
        r = _row(s)
        lines.append(f" {s.size_bytes:>12} {s.count:>12} {r['dtype']:>6} {s.algorithm.value:>18} "
                     f"{s.time_median_us:>10.2f} {s.algbw_GBps:>8.4f} {s.busbw_GBps:>8.4f} {s.time_p99_us:>10.2f}")
    return "\n".join(lines)


STEPS_COLUMNS = ("collective", "algorithm", "size_bytes", "iteration", "rank", "step", "peers", "sent_bytes",
                 "received_bytes", "start_ns", "end_ns")


def steps_csv(outcome) -> str:
    """One row per algorithm step of every timed iteration (`genie bench --steps`)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(STEPS_COLUMNS)
    for case_index, per_rank in sorted(outcome.steps.items()):
        op = outcome.job.cases[case_index].op
        for rank, rows in sorted(per_rank.items()):
            for it, step, start, end, sent, received, peers in rows:
                writer.writerow((op.collective.value, op.algorithm.value, op.size_bytes, it, rank, step,
                                 " ".join(map(str, peers)), sent, received, start, end))
    return out.getvalue()


def write_steps(run_dir: Path, outcome) -> None:
    write_atomic(Path(run_dir) / "steps.csv", steps_csv(outcome))
