"""`genie report` and `genie report compare` as services: a run directory rendered as one HTML page, and two run
directories compared (a run directory of its own, with its manifest)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional


@dataclass(frozen=True)
class ShowRequest:
    run_dir: Path
    out: Optional[Path] = None  # the HTML file (default: RUN_DIR/report.html)


@dataclass(frozen=True)
class ShowResult:
    kind: str
    status: str
    html_path: Path
    plots: int


@dataclass(frozen=True)
class CompareRequest:
    run_a: Path
    run_b: Path
    out: Optional[Path] = None
    force: bool = False


@dataclass(frozen=True)
class CompareResult:
    run_dir: Path
    comparison: Any  # genie.report.compare.Comparison


def show_run(request: ShowRequest) -> ShowResult:
    """Render the run as report.html (+ plots/*.png); inside the run directory, they join its manifest."""
    from genie.core.files import write_atomic
    from genie.report.html import build_page
    from genie.report.manifest import add_run_files
    from genie.report.rundata import load_run

    run_dir = request.run_dir
    run = load_run(run_dir)
    html_path = Path(request.out) if request.out is not None else run_dir / "report.html"
    inside = html_path.parent.resolve() == run_dir.resolve()
    prefix = "" if inside else os.path.relpath(run_dir.resolve(), html_path.parent.resolve()) + "/"
    page = build_page(run, link_prefix=prefix)
    for name, png in page.plots.items():
        write_atomic(html_path.parent / "plots" / name, png)
    write_atomic(html_path, page.html)
    if inside:
        add_run_files(run_dir, [html_path.name, *(f"plots/{name}" for name in page.plots)])
    return ShowResult(run.kind, str(run.status), html_path, len(page.plots))


def compare_run_dirs(request: CompareRequest) -> CompareResult:
    """B against A: compare.csv and compare.png in a compare run directory; notes become manifest warnings."""
    from genie.report.compare import compare_csv, compare_runs
    from genie.report.manifest import RunRecorder, input_digest
    from genie.report.plots import compare_deltas
    from genie.report.rundata import load_run

    a, b = load_run(request.run_a), load_run(request.run_b)
    comparison = compare_runs(a, b, force=request.force)
    with RunRecorder("compare", out=request.out, inputs=(input_digest(request.run_a, "run_a"),
                                                         input_digest(request.run_b, "run_b")),
                     params={"force": request.force}) as run:
        run.write("compare.csv", compare_csv(comparison))
        png = compare_deltas(comparison.rows, a.run_dir.name, b.run_dir.name)
        if png:
            run.write("compare.png", png)
        for note in comparison.notes:
            run.warn(note)
    return CompareResult(run.run_dir, comparison)
