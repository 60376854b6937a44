"""`genie report RUN_DIR`: load the run, build its page, write the page and its plots (and list them in the run's
manifest when the page is written inside the run directory)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from genie.report.html import build_page
from genie.report.manifest import add_run_files
from genie.report.rundata import RunData, load_run
from genie.report.rundir import write_atomic

REPORT_NAME = "report.html"


@dataclass(frozen=True)
class WrittenReport:
    run: RunData
    html_path: Path
    plots: tuple[str, ...]  # file names under plots/ beside the page


def write_report(run_dir: Path, out: Path | None = None) -> WrittenReport:
    """The page of `run_dir` written to `out` (default: RUN_DIR/report.html), its plots to plots/ beside it."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    html_path = Path(out) if out is not None else run_dir / REPORT_NAME
    inside = html_path.parent.resolve() == run_dir.resolve()
    prefix = "" if inside else os.path.relpath(run_dir.resolve(), html_path.parent.resolve()) + "/"
    page = build_page(run, link_prefix=prefix)
    for name, png in page.plots.items():
        write_atomic(html_path.parent / "plots" / name, png)
    write_atomic(html_path, page.html)
    if inside:
        add_run_files(run_dir, [html_path.name, *(f"plots/{name}" for name in page.plots)])
    return WrittenReport(run, html_path, tuple(page.plots))
