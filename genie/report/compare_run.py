"""`genie report compare RUN_A RUN_B`: load both runs, compare them and record the comparison as a run of its
own (compare.csv, compare.png, the warnings and notes in its manifest)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from genie.report.compare import Comparison, compare_csv, compare_runs
from genie.report.manifest import RunRecorder, input_digest
from genie.report.plots import compare_deltas
from genie.report.rundata import load_run


@dataclass(frozen=True)
class RecordedComparison:
    comparison: Comparison
    run_dir: Path


def record_comparison(run_a: Path, run_b: Path, *, out: Path | None = None, force: bool = False,
                      root: Path = Path("runs")) -> RecordedComparison:
    a, b = load_run(run_a), load_run(run_b)
    comparison = compare_runs(a, b, force=force)
    with RunRecorder("compare", out=out, root=root, inputs=(input_digest(run_a, "run_a"), input_digest(run_b, "run_b")),
                     params={"force": force}) as run:
        run.write("compare.csv", compare_csv(comparison))
        rows = comparison.rows
        png = compare_deltas([r.label for r in rows], [r.time_delta_pct for r in rows], [r.noise_pct for r in rows],
                             f"{b.run_dir.name} vs {a.run_dir.name}: time change (red = slower, grey = within "
                             "noise; bars: noise band)")
        if png:
            run.write("compare.png", png)
        for message in comparison.notes:
            run.warn(message)
    return RecordedComparison(comparison, run.run_dir)
