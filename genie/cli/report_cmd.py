"""`genie report RUN_DIR` (an HTML page of a run) and `genie report compare RUN_A RUN_B` (what changed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup


class _ShowByDefault(TyperGroup):
    """`genie report RUN_DIR` means `genie report show RUN_DIR` (a run directory literally named like a
    subcommand needs the explicit `show`)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["show", *args]
        return super().resolve_command(ctx, args)


app = typer.Typer(cls=_ShowByDefault, no_args_is_help=True,
                  help="Reports of run directories: `genie report RUN_DIR`, `genie report compare RUN_A RUN_B`.")


@app.command("show")
def show(
    run_dir: Path = typer.Argument(..., help="A run directory written by bench, replay, estimate, experiment..."),
    out: Optional[Path] = typer.Option(None, "--out", help="HTML file to write (default: RUN_DIR/report.html)."),
) -> None:
    """Render RUN_DIR as one self-contained HTML page (summary, tables, plots); plots also go to plots/*.png."""
    from genie.report.show import write_report

    written = write_report(run_dir, out)
    typer.echo(f"# {written.run.kind.value} run, status {written.run.status}: {len(written.plots)} plot(s)")
    typer.echo(f"# report in {written.html_path}")


@app.command("compare")
def compare(
    run_a: Path = typer.Argument(..., help="The reference run directory (A)."),
    run_b: Path = typer.Argument(..., help="The run directory compared with it (B)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Directory for compare.csv/compare.png "
                                                          "(default: runs/<time>-compare)."),
    force: bool = typer.Option(False, "--force", help="Compare runs of different workloads (what they share)."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON instead of the table."),
) -> None:
    """Per collective and size (bench) or per op kind and the iteration time (replay): B − A in us and %."""
    from genie.report.compare import compare_csv, compare_runs, format_compare
    from genie.report.manifest import RunRecorder, input_digest
    from genie.report.plots import compare_deltas
    from genie.report.rundata import load_run

    a, b = load_run(run_a), load_run(run_b)
    comparison = compare_runs(a, b, force=force)
    with RunRecorder("compare", out=out, inputs=(input_digest(run_a, "run_a"), input_digest(run_b, "run_b")),
                     params={"force": force}) as run:
        run.write("compare.csv", compare_csv(comparison))
        png = compare_deltas([r.label for r in comparison.rows], [r.time_delta_pct for r in comparison.rows],
                             [None] * len(comparison.rows),
                             f"{b.run_dir.name} vs {a.run_dir.name}: time change (red = slower)")
        if png:
            run.write("compare.png", png)
        if comparison.notes:
            for note in comparison.notes:
                run.warn(note)
    if as_json:
        rows = [{"scope": r.scope, "collective": r.collective, "size_bytes": r.size_bytes, "time_a_us": r.time_a_us,
                 "time_b_us": r.time_b_us, "time_delta_us": r.time_delta_us, "time_delta_pct": r.time_delta_pct,
                 "busbw_a_GBps": r.busbw_a_GBps, "busbw_b_GBps": r.busbw_b_GBps,
                 "busbw_delta_GBps": r.busbw_delta_GBps, "busbw_delta_pct": r.busbw_delta_pct}
                for r in comparison.rows]
        typer.echo(json.dumps({"run_dir": str(run.run_dir), "kind": comparison.kind, "run_a": comparison.run_a,
                               "run_b": comparison.run_b, "notes": list(comparison.notes), "rows": rows}, indent=2))
        return
    typer.echo(format_compare(comparison))
    typer.echo(f"# results in {run.run_dir}")
