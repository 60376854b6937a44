"""What `genie report` shows of a run, section by section (pure: RunData -> sections of text, plots, tables).

Each section builder looks at what the run has, whatever its kind, so a run directory without a manifest shows
what it holds. The measurement sections (sweep, per-iteration times, replay, links) are here; the sections of
experiment, estimate, diagnose, verify and compare runs are in `genie.report.kind_sections`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pandas as pd

from genie.report import plots
from genie.report.cases import CaseKey, percentiles_us, sweep_curves
from genie.report.rundata import LONG_FILES, RunData


@dataclass(frozen=True)
class PagePlot:
    name: str  # file name under plots/
    caption: str
    png: bytes | None


@dataclass(frozen=True)
class Section:
    title: str
    lines: tuple[str, ...] = ()
    plots: tuple[PagePlot, ...] = ()
    tables: tuple[tuple[str, pd.DataFrame | None], ...] = field(default_factory=tuple)
    text: str = ""  # preformatted (a command's own summary)

    @property
    def empty(self) -> bool:
        return not (self.lines or self.text or any(p.png for p in self.plots) or
                    any(frame is not None and not frame.empty for _, frame in self.tables))


def size_text(size_bytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g} {unit}"
    return f"{int(size_bytes)} B"


def sweep_section(run: RunData) -> Section:
    if not run.sweep:
        return Section("Sweep")
    curves = sweep_curves(run.sweep)
    lines = [f"{len(curves)} curve(s), one per collective and group size: " +
             "; ".join(f"{c.label} ({len(rows)} sizes, {size_text(rows[0].size_bytes)}..{size_text(rows[-1].size_bytes)})"
                       for c, rows in curves.items())]
    return Section("Sweep", tuple(lines),
                   (PagePlot("busbw.png", "busbw vs message size, one curve per collective and group size",
                             plots.busbw_vs_size(run.sweep, link_rate_bps=run.link_rate_bps)),),
                   (("Sweep (sweep.csv)", pd.DataFrame([dataclasses.asdict(r) for r in run.sweep])),))


def iteration_table(run: RunData) -> pd.DataFrame:
    """Per case with per-iteration times: the groups it ran on (sweep_detail.csv) and the times' statistics."""
    groups = {d.key: d.groups for d in run.detail}
    rows = []
    for r in run.sweep:
        key = CaseKey.of(r)
        times = run.iteration_us.get(key)
        if not times:
            continue
        row: dict[str, object] = {"collective": r.collective, "algorithm": r.algorithm, "ranks": r.ranks,
                                  "size_bytes": r.size_bytes}
        if key in groups:
            row["groups"] = groups[key]
        row["iterations"] = len(times)
        row.update({k: round(v, 3) for k, v in percentiles_us(times).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def iterations_section(run: RunData) -> Section:
    if not run.sweep:
        return Section("Per-iteration times")
    table = iteration_table(run)
    if table.empty:
        lines = ["per-iteration times not recorded: the distribution shows sweep.csv's min / median / p99 / max"]
    else:
        lines = [f"per-iteration times of {len(table)} of {len(run.sweep)} sweep rows, from {run.iteration_source}"]
    return Section("Per-iteration times", tuple(lines),
                   (PagePlot("latency.png", "iteration time distribution per size, per curve",
                             plots.latency_by_size(run.sweep, run.iteration_us, run.iteration_source)),),
                   ((f"Per-iteration times ({run.iteration_source})", table),) if not table.empty else ())


def timeline_table(ops: pd.DataFrame | None) -> pd.DataFrame:
    """Per op kind and size over every rank and iteration of ops.csv: count per iteration and durations."""
    if ops is None or ops.empty:
        return pd.DataFrame()
    frame = ops.assign(duration_us=(ops["end_ns"] - ops["start_ns"]) / 1e3, type=ops["type"].astype(str))
    iterations = max(1, frame["iteration"].nunique())
    rows = []
    for (kind, size), group in frame.groupby(["type", "bytes"], sort=True):
        d = group["duration_us"]
        rows.append({"type": kind, "bytes": int(size or 0), "ops per iteration": len(group) / iterations,
                     "ranks": group["rank"].nunique(), "median_us": d.median(), "min_us": d.min(),
                     "p99_us": d.quantile(0.99), "max_us": d.max(),
                     "total per iteration_ms": d.sum() / iterations / 1e3})
    return pd.DataFrame(rows)


def replay_section(run: RunData) -> Section:
    if not run.replay and run.ops is None and run.ranks is None:
        return Section("Replay")
    p = run.replay_prefix
    lines = []
    if run.replay:
        times = [int(t) for t in run.replay.get("iteration_ns") or ()]
        line = f"iteration time median {run.replay['iteration_median_ns'] / 1e6:.3f} ms over {len(times)} iteration(s)"
        if times:
            line += f" (min {min(times) / 1e6:.3f}, max {max(times) / 1e6:.3f} ms)"
        lines.append(line + (f", from {p}replay.json" if p else ""))
    if run.ops is not None and not run.ops.empty:
        lines.append(f"timeline: {len(run.ops)} op records over {run.ops['rank'].nunique()} ranks in {p}ops.csv "
                     f"(the Chrome/Perfetto trace is {p}timeline.json)")
    tables = []
    if run.ranks is not None:
        tables.append((f"Ranks ({p}ranks.csv, iteration 0)", run.ranks[run.ranks["iteration"] == 0]))
    tables.append((f"Timeline summary ({p}ops.csv, per op kind and size)", timeline_table(run.ops)))
    return Section("Replay", tuple(lines),
                   (PagePlot("timeline.png", "per-rank timeline of iteration 0 (compute and communication lanes)",
                             plots.replay_gantt(run.ops)),), tuple(tables))


def links_section(run: RunData) -> Section:
    rates = {f"{r['src']}→{r['dst']}": r.get("rate_bps") for r in run.links}
    return Section("Links", (), (
        PagePlot("links_heatmap.png", "link utilisation over time", plots.link_heatmap(run.samples, rates)),
        PagePlot("links_totals.png", "traffic per link direction", plots.link_totals(run.links))),
        (("Links (links.csv)", pd.DataFrame(list(run.links))), ("TCP per host (tcp.csv)", run.tcp)))


def other_section(run: RunData) -> Section:
    return Section("Other files", (), (), tuple((name, frame) for name, frame in run.other_tables.items()
                                                if name not in LONG_FILES))
