"""The sweep report: sweep.csv and sweep.json (the table on stdout is genie.report.nccl_table).

``time_us`` is nccl-tests' time (the mean iteration time: timed loop / iterations); algbw and busbw follow
from it. The median and the percentiles have their own columns (``time_median_us``, ``time_p99_us``...)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from genie.core.errors import InputError
from genie.measure.metrics import CaseStats
from genie.core.files import write_atomic

SWEEP_COLUMNS = ("collective", "algorithm", "ranks", "size_bytes", "count", "dtype", "iterations", "time_us",
                 "time_min_us", "time_median_us", "time_p99_us", "time_max_us", "algbw_GBps", "busbw_GBps")

_DTYPE_NAMES = {1: "int8", 2: "half", 4: "float", 8: "double"}


def _row(s: CaseStats) -> dict[str, object]:
    return {"collective": s.collective.value, "algorithm": s.algorithm.value, "ranks": s.ranks,
            "size_bytes": s.size_bytes, "count": s.count, "dtype": _DTYPE_NAMES.get(s.dtype_bytes, "bytes"),
            "iterations": s.iterations, "time_us": round(s.time_us, 3), "time_min_us": round(s.time_min_us, 3),
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


def sweep_document(stats: Sequence[CaseStats], meta: dict[str, object] | None = None,
                   iteration_ns: Sequence[Sequence[int]] | None = None) -> dict[str, object]:
    """sweep.json's content. `iteration_ns[i]`, when given and not empty, adds result i's per-iteration times
    as ``iteration_us`` (the box plots use them)."""
    results = []
    for i, s in enumerate(stats):
        row: dict[str, object] = _row(s)
        times = iteration_ns[i] if iteration_ns is not None and i < len(iteration_ns) else ()
        if times:
            row["iteration_us"] = [round(t / 1e3, 3) for t in times]
        results.append(row)
    return {"meta": meta or {}, "results": results}


def sweep_json(stats: Sequence[CaseStats], meta: dict[str, object] | None = None,
               iteration_ns: Sequence[Sequence[int]] | None = None) -> str:
    return json.dumps(sweep_document(stats, meta, iteration_ns), indent=2) + "\n"


def write_sweep(run_dir: Path, stats: Sequence[CaseStats], meta: dict[str, object] | None = None) -> None:
    write_atomic(Path(run_dir) / "sweep.csv", sweep_csv(stats))
    write_atomic(Path(run_dir) / "sweep.json", sweep_json(stats, meta))


@dataclass(frozen=True)
class SweepRow:
    """One row of sweep.csv as read back (reports, compare)."""

    collective: str
    algorithm: str
    ranks: int
    size_bytes: int
    count: int
    dtype: str
    iterations: int
    time_min_us: float
    time_median_us: float
    time_p99_us: float
    time_max_us: float
    algbw_GBps: float
    busbw_GBps: float
    time_us: float | None = None  # the mean; None in sweep.csv files written before it was a column


#: columns a sweep.csv may lack (files from older genie versions)
_OPTIONAL_COLUMNS = ("time_us",)


def read_sweep_csv(data: bytes | str, *, source: str = "sweep.csv") -> list[SweepRow]:
    text = data.decode() if isinstance(data, (bytes, bytearray)) else data
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in SWEEP_COLUMNS if c not in (reader.fieldnames or ()) and c not in _OPTIONAL_COLUMNS]
    if missing:
        raise InputError(f"missing column {missing[0]!r}", source=source)
    rows = []
    types = {f.name: f.type for f in SweepRow.__dataclass_fields__.values()}
    for line, raw in enumerate(reader, start=2):
        values: dict[str, object] = {}
        for name, kind in types.items():
            if name in _OPTIONAL_COLUMNS and not raw.get(name):
                continue
            try:
                values[name] = (int(raw[name]) if kind == "int" else raw[name] if kind == "str"
                                else float(raw[name]))
            except (TypeError, ValueError):
                raise InputError(f"expected a number, got {raw[name]!r}", source=source,
                                 path=f"line {line}: {name}") from None
        rows.append(SweepRow(**values))  # type: ignore[arg-type]
    return rows


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


def end_summary(stats: Sequence[CaseStats], run_dir: Path, *, duration_s: float | None = None,
                link_rate_bps: int | None = None, links: Mapping[str, int] | None = None) -> str:
    """The closing lines of `genie bench`: what ran, the best busbw (against the line rate when known), links."""
    if not stats:
        return f"# bench: nothing measured\n# results in {run_dir}"
    ranks = max(s.ranks for s in stats)
    collectives = ", ".join(dict.fromkeys(s.collective.value for s in stats))
    took = f" in {duration_s:.1f} s" if duration_s is not None else ""
    best = max(stats, key=lambda s: s.busbw_GBps)
    line = (f"# bench: {len(stats)} sizes of {collectives} on {ranks} ranks{took}; peak busbw "
            f"{best.busbw_GBps:.4f} GB/s ({best.collective.value}, {best.size_bytes} B)")
    if link_rate_bps:
        line_rate = link_rate_bps / 8e9
        line += f" = {100 * best.busbw_GBps / line_rate:.0f}% of the {line_rate:.4f} GB/s line rate"
    if links:
        line += (f"; links moved {links['link_bytes'] / 1e6:.3f} MB, {links['link_drops']} drops, "
                 f"{links['tcp_retrans_segs']} TCP retransmissions")
    return line + f"\n# results in {run_dir}"
