"""`genie report RUN_DIR`: one self-contained HTML page (jinja2; plots embedded as base64 PNG, and also returned
so the CLI can write them as files) with the run's summary, facts and sections (genie.report.sections and
kind_sections: each section's text, plots and tables), ordered for the run's kind."""

from __future__ import annotations

import base64
import importlib.resources
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import jinja2
import pandas as pd

from genie import __version__
from genie.core.units import describe_rate
from genie.report import kind_sections, sections
from genie.report.mix_section import mix_section
from genie.report.rundata import RunData, RunKind
from genie.report.sections import Section

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


_SUMMARISED = ("Accuracy: estimated vs measured", "Estimate", "Diagnosis", "Link checks", "Comparison")


def _summary(run: RunData, shown: list[Section]) -> list[str]:
    lines: list[str] = []
    if run.manifest is None:
        lines.append(f"no manifest.json (a run directory from before manifests): shown as a {run.kind.value} run "
                     "guessed from its files; the command, versions and inputs are unknown")
    by_title = {section.title: section for section in shown}
    if _SUMMARISED[0] in by_title:
        lines += by_title[_SUMMARISED[0]].lines
    if run.sweep:
        best = max(run.sweep, key=lambda r: r.busbw_GBps)
        groups = " and ".join(str(n) for n in run.group_sizes)
        lines.append(f"{len(run.sweep)} measured sizes of {', '.join(run.collectives)} on groups of {groups} ranks")
        line = (f"peak busbw {best.busbw_GBps:.4f} GB/s ({best.collective} on {best.ranks} ranks, "
                f"{best.size_bytes} B)")
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
    for title in _SUMMARISED[1:]:
        if title in by_title:
            lines += by_title[title].lines[:3]
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
                                  f"{t.get('links')} links" + (f", host links {describe_rate(rate)}" if rate else "")))
    facts += _dilation_facts(m.time_dilation)
    for i in m.inputs:
        facts.append((f"input ({i.role})", f"{i.path} sha256 {i.sha256 or 'unreadable'}"))
    if m.seed is not None:
        facts.append(("seed", str(m.seed)))
    if m.params:
        facts.append(("parameters", ", ".join(f"{k}={v}" for k, v in m.params.items())))
    return facts


def _dilation_facts(recorded: Any) -> list[tuple[str, str]]:
    """The manifest's `time_dilation` (docs/dilation.md): the factor and why, each size's where a sweep ran its
    sizes at their own, and an experiment's replay's; nothing for an undilated run."""
    from genie.core.dilation import TimeDilation
    from genie.core.units import format_size

    if not recorded:
        return []
    facts = []
    dilation = TimeDilation.from_dict(recorded)
    per_size, replay = recorded.get("per_size") or (), recorded.get("replay")
    if dilation.active or per_size or replay:
        facts.append(("time dilation, the testbed's" if per_size else "time dilation", dilation.describe()))
    for entry in per_size:
        facts.append((f"time dilation, {format_size(int(entry['size_bytes']))}",
                      TimeDilation.from_dict(entry).describe()))
    if replay:
        facts.append(("time dilation, the replay", TimeDilation.from_dict(replay).describe()))
    facts += [(f"auto's limit: {limit.name}", limit.detail) for limit in dilation.limits]
    return facts


def page_sections(run: RunData) -> list[Section]:
    """The page's sections in the order the run's kind reads best; empty ones are left out."""
    cal, acc = kind_sections.calibration_section(run), kind_sections.accuracy_section(run)
    sweep, its = sections.sweep_section(run), sections.iterations_section(run)
    replay, est = sections.replay_section(run), kind_sections.estimate_section(run)
    if run.kind is RunKind.EXPERIMENT:
        text = Section("Experiment summary (summary.txt)", text=run.summary_text or "")
        order = [acc, text, sweep, its, cal, replay, est]
    elif run.kind is RunKind.ESTIMATE:
        order = [est, cal, acc, sweep, its, replay]
    elif run.kind is RunKind.CALIBRATE:
        order = [kind_sections.nccl_calibration_section(run)]
    else:
        order = [sweep, its, replay, acc, est, cal]
    order = [mix_section(run), *order]
    order += [kind_sections.diagnose_section(run), kind_sections.verify_section(run),
              kind_sections.compare_section(run), sections.links_section(run)]
    if run.kind is not RunKind.CALIBRATE:  # a calibration's tables are its own section's
        order.append(sections.other_section(run))
    return [s for s in order if not s.empty]


def _tables(section: Section) -> list[dict[str, str]]:
    out = []
    for title, frame in section.tables:
        if frame is not None and not frame.empty:
            html, note = _table(frame)
            out.append({"title": title, "html": html, "note": note})
    return out


def build_page(run: RunData, *, link_prefix: str = "") -> Page:
    """The page and its plots (to be written to plots/ beside the page). `link_prefix` is prepended to links to
    the run's files: the run directory as seen from where the page is written ("" when inside it)."""
    shown = page_sections(run)
    drawn = [(p.name, p.caption, p.png) for section in shown for p in section.plots if p.png]
    files = list(run.manifest.files) if run.manifest else []
    template = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(
        importlib.resources.files("genie.report").joinpath("report.html.j2").read_text())
    context: dict[str, Any] = {
        "kind": run.kind.value, "title": run.manifest.name if run.manifest else run.run_dir.name, "status": run.status,
        "summary": _summary(run, shown), "facts": _facts(run),
        "error": run.manifest.error if run.manifest else None,
        "warnings": run.manifest.warnings if run.manifest else (),
        "sections": [{"title": section.title, "lines": section.lines, "text": section.text,
                      "plots": [{"file": f"plots/{p.name}", "caption": p.caption,
                                 "base64": base64.b64encode(p.png).decode()} for p in section.plots if p.png],
                      "tables": _tables(section)} for section in shown],
        "files": [{"name": f"{link_prefix}{f.name}", "size_bytes": f.size_bytes, "sha256": f.sha256} for f in files],
        "genie_version": __version__,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return Page(template.render(**context), {name: png for name, _, png in drawn})
