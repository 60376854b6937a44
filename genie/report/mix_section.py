"""A job mix's section of `genie report`: the per-job table (alone, together / mixed, slowdown), a slowdown
plot, and the link traffic split by job (docs/jobs.md)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from genie.report.sections import PagePlot, Section


def _numeric(frame: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(frame[col], errors="coerce")


def slowdown_bars(frame: pd.DataFrame) -> bytes | None:
    """Each job's slowdown from sharing (per placement for an estimate's ranking)."""
    from matplotlib.figure import Figure

    from genie.report.plots import _png

    if frame is None or frame.empty or "slowdown_pct" not in frame:
        return None
    labels = [f"{p} / {j}" if "placement" in frame else str(j)
              for p, j in zip(frame.get("placement", frame["job"]), frame["job"])]
    values = _numeric(frame, "slowdown_pct").fillna(0.0).tolist()
    fig = Figure(figsize=(8, 0.4 * len(labels) + 1.5))
    ax = fig.add_subplot()
    ax.barh(labels, values, color=["tab:red" if v > 0 else "tab:green" for v in values])
    ax.invert_yaxis()
    ax.set_xlabel("slowdown beside the other jobs (%)")
    ax.set_title("job mix: iteration together vs alone")
    return _png(fig)


def mix_links_table(links: pd.DataFrame) -> pd.DataFrame:
    """One row per link direction (and placement), one column per job named with its unit (``<job>_bytes``: the
    payload bytes the job's flows put on the direction), ``jobs`` the number of jobs crossing it; the directions
    crossed by more than one job (where the jobs meet) first."""
    value = next((c for c in ("payload_bytes", "connections") if c in links), None)
    if value is None or "job" not in links or "link" not in links:
        return links
    index = [c for c in ("placement", "link") if c in links]
    frame = pd.DataFrame({**{c: links[c].astype(object) for c in (*index, "job")},
                          value: _numeric(links, value).fillna(0.0).astype(float)})
    table = frame.pivot_table(index=index, columns="job", values=value, aggfunc="sum").fillna(0.0)
    jobs = (table > 0).sum(axis=1)
    unit = "bytes" if value == "payload_bytes" else value
    table = table.rename(columns={job: f"{job}_{unit}" for job in table.columns})
    table = table.assign(jobs=jobs).reset_index()
    table.columns = [str(c) for c in table.columns]
    return table.sort_values(["jobs", *index], ascending=[False, *([True] * len(index))]).reset_index(drop=True)


def mix_section(run: Any) -> Section:
    """The page's job-mix section (empty for other runs)."""
    frame = getattr(run, "mix", None)
    if frame is None:
        return Section("Job mix")
    shown = frame.copy()
    for col in ("alone_ns", "together_ns", "mixed_ns"):
        if col in shown:
            shown[col.replace("_ns", "_ms")] = (_numeric(shown, col) / 1e6).round(3)
            shown = shown.drop(columns=col)
    tables: tuple = (("per job", shown),)
    links = getattr(run, "mix_links", None)
    if links is not None and not links.empty:
        tables += (("payload bytes per link direction and job (jobs > 1: where they meet)", mix_links_table(links)),)
    return Section("Job mix", lines=("each job's iteration beside the other jobs and alone on the same hosts "
                                     "(docs/jobs.md)",),
                   plots=(PagePlot("mix_slowdown.png", "slowdown per job", slowdown_bars(frame)),), tables=tables)
