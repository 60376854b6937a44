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
    from genie.services.report import ShowRequest, show_run

    shown = show_run(ShowRequest(run_dir, out))
    typer.echo(f"# {shown.kind} run, status {shown.status}: {shown.plots} plot(s)")
    typer.echo(f"# report in {shown.html_path}")


@app.command("compare")
def compare(
    run_a: Path = typer.Argument(..., help="The reference run directory (A)."),
    run_b: Path = typer.Argument(..., help="The run directory compared with it (B)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Directory for compare.csv/compare.png "
                                                          "(default: runs/<time>-compare)."),
    force: bool = typer.Option(False, "--force", help="Compare runs of different workloads (what they share)."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON instead of the table."),
) -> None:
    """Per collective, group size, algorithm and size (bench, experiment sweeps) or per op kind and the iteration
    time (replay): B − A in us and %, with a noise band from each run's iteration spread."""
    from genie.report.compare import comparison_document, format_compare
    from genie.services.report import CompareRequest, compare_run_dirs

    result = compare_run_dirs(CompareRequest(run_a, run_b, out, force))
    if as_json:
        typer.echo(json.dumps(comparison_document(result.comparison, str(result.run_dir)), indent=2))
        return
    typer.echo(format_compare(result.comparison))
    typer.echo(f"# results in {result.run_dir}")
