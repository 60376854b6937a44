"""`genie report RUN_DIR`: one self-contained HTML page (jinja2; plots embedded as base64 PNG, and also returned
so the CLI can write them as files) with the run's summary, facts, plots and tables."""

from __future__ import annotations

import base64
import dataclasses
import importlib.resources
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import jinja2
import pandas as pd

from genie import __version__
from genie.report import plots
from genie.report.rundata import LONG_FILES, RunData

TABLE_ROWS_MAX = 200


@dataclass(frozen=True)
class Page:
    html: str
    plots: dict[str, bytes]  # file name (relative, under plots/) -> PNG


def _number(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 1e5 else f"{v:.4f}".rstrip("0").rstrip(".")


def _table(frame: pd.DataFrame, limit: int = TABLE_ROWS_MAX) -> tuple[str, str]:
    note = f"first {limit} of {len(frame)} rows" if len(frame) > limit else ""
    shown = frame.head(limit).copy()
    for col in shown.columns:
        values = pd.to_numeric(shown[col], errors="coerce")
        if shown[col].notna().any() and values.notna().sum() == shown[col].notna().sum():
            whole = values.dropna()
            shown[col] = values.astype("Int64") if (whole % 1 == 0).all() else values
    return shown.to_html(index=False, border=0, na_rep="", float_format=_number), note


def _summary(run: RunData) -> list[str]:
    lines: list[str] = []
    if run.sweep:
        best = max(run.sweep, key=lambda r: r.busbw_GBps)
        lines.append(f"{len(run.sweep)} measured sizes of {', '.join(run.collectives)} on {best.ranks} ranks")
        line = f"peak busbw {best.busbw_GBps:.4f} GB/s ({best.collective}, {best.size_bytes} B)"
        if run.link_rate_bps:
            rate = run.link_rate_bps / 8e9
            line += f" = {100 * best.busbw_GBps / rate:.0f}% of the {rate:.4g} GB/s line rate"
        lines.append(line)
    if run.replay:
        ranks = run.replay.get("ranks") or []
        lines.append(f"replay of {len(ranks)} ranks: iteration time median "
                     f"{run.replay['iteration_median_ns'] / 1e6:.3f} ms over "
                     f"{len(run.replay.get('iteration_ns') or [])} iteration(s)")
        if ranks:
            worst = max(ranks, key=lambda r: r["exposed_comm_ns"])
            lines.append(f"exposed communication up to {worst['exposed_comm_ns'] / 1e6:.3f} ms (rank {worst['rank']}), "
                         f"compute {worst['compute_ns'] / 1e6:.3f} ms")
    if run.links:
        total = sum(float(r["bytes"] or 0) for r in run.links)
        drops = sum(float(r.get(k) or 0) for r in run.links for k in ("tx_drops", "rx_drops", "qdisc_drops"))
        lines.append(f"links moved {total / 1e6:.3f} MB in total, {drops:.0f} packets dropped")
    if run.tcp is not None and not run.tcp.empty:
        retrans = pd.to_numeric(run.tcp["retrans_segs"], errors="coerce").fillna(0).sum()
        lines.append(f"TCP retransmitted {retrans:.0f} segments")
    if run.manifest is not None and run.manifest.duration_s is not None:
        lines.append(f"took {run.manifest.duration_s:.1f} s")
    return lines or ["no measurements in this run directory"]


def _facts(run: RunData) -> list[tuple[str, str]]:
    m = run.manifest
    if m is None:
        return [("directory", str(run.run_dir)), ("manifest", "none (written before manifests existed)")]
    facts = [("directory", str(run.run_dir)), ("command", " ".join(m.argv)), ("started", m.started_at),
             ("ended", m.ended_at or "-"), ("genie", m.genie_version), ("python", m.python_version),
             ("kernel", " ".join(str(m.kernel.get(k, "")) for k in ("sysname", "release", "machine"))),
             ("target", m.target or "-"), ("shaper", m.shaper.label if m.shaper is not None else "-")]
    if m.topology:
        t = m.topology
        rate = t.get("link_rate_bps")
        facts.append(("topology", f"{t.get('name')}: {t.get('hosts')} hosts, {t.get('switches')} switches, "
                                  f"{t.get('links')} links" + (f", host links {rate / 1e9:g} Gbit/s" if rate else "")))
    for i in m.inputs:
        facts.append((f"input ({i.role})", f"{i.path} sha256 {i.sha256 or 'unreadable'}"))
    if m.seed is not None:
        facts.append(("seed", str(m.seed)))
    if m.params:
        facts.append(("parameters", ", ".join(f"{k}={v}" for k, v in m.params.items())))
    return facts


def _plots(run: RunData) -> list[tuple[str, str, bytes | None]]:
    rates = {f"{r['src']}→{r['dst']}": r.get("rate_bps") for r in run.links}
    return [
        ("busbw.png", "busbw vs message size", plots.busbw_vs_size(run.sweep, link_rate_bps=run.link_rate_bps)),
        ("latency.png", "iteration time distribution per size", plots.latency_by_size(run.sweep, run.iteration_us)),
        ("timeline.png", "per-rank timeline of iteration 0 (compute and communication lanes)",
         plots.replay_gantt(run.ops)),
        ("links_heatmap.png", "link utilisation over time", plots.link_heatmap(run.samples, rates)),
        ("links_totals.png", "traffic per link direction", plots.link_totals(run.links)),
        ("accuracy.png", "estimated vs measured", plots.accuracy_bars(run.accuracy, run.accuracy_pairs)),
    ]


def _tables(run: RunData) -> list[dict[str, str]]:
    out = []

    def add(title: str, frame: pd.DataFrame | None) -> None:
        if frame is not None and not frame.empty:
            html, note = _table(frame)
            out.append({"title": title, "html": html, "note": note})

    if run.sweep:
        add("Sweep (sweep.csv)", pd.DataFrame([dataclasses.asdict(r) for r in run.sweep]))
    if run.ranks is not None:
        add("Ranks (ranks.csv, iteration 0)", run.ranks[run.ranks["iteration"] == 0])
    if run.links:
        add("Links (links.csv)", pd.DataFrame(list(run.links)))
    add("TCP per host (tcp.csv)", run.tcp)
    add("Accuracy (accuracy.csv)", run.accuracy)
    for name, frame in run.other_tables.items():
        if name not in LONG_FILES:
            add(name, frame)
    return out


def build_page(run: RunData, *, link_prefix: str = "") -> Page:
    """The page and its plots (to be written to plots/ beside the page). `link_prefix` is prepended to links to
    the run's files: the run directory as seen from where the page is written ("" when inside it)."""
    drawn = [(name, caption, png) for name, caption, png in _plots(run) if png]
    files = list(run.manifest.files) if run.manifest else []
    template = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(
        importlib.resources.files("genie.report").joinpath("report.html.j2").read_text())
    context: dict[str, Any] = {
        "kind": run.kind, "title": run.manifest.name if run.manifest else run.run_dir.name, "status": run.status,
        "summary": _summary(run), "facts": _facts(run),
        "error": run.manifest.error if run.manifest else None,
        "warnings": run.manifest.warnings if run.manifest else (),
        "plots": [{"file": f"plots/{name}", "caption": caption,
                   "base64": base64.b64encode(png).decode()} for name, caption, png in drawn],
        "tables": _tables(run),
        "files": [{"name": f"{link_prefix}{f.name}", "size_bytes": f.size_bytes, "sha256": f.sha256} for f in files],
        "genie_version": __version__,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return Page(template.render(**context), {name: png for name, _, png in drawn})
