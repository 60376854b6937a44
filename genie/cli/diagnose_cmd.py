"""`genie diagnose`: find slow links and hosts of a testbed from a pairwise latency/bandwidth matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from genie.core.errors import InputError
from genie.core.units import parse_size_bytes


def diagnose(
    testbed: str = typer.Option(..., "--testbed", help="A testbed that is up."),
    size: str = typer.Option("8M", "--size", help="Message size of the bandwidth test."),
    iters: int = typer.Option(3, "--iters", "-n", help="Bandwidth iterations per pair."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-diagnose)."),
) -> None:
    """Measure every host pair, flag outliers against the configuration and the median; exit 1 when flagged."""
    from genie.cli.progress import count_progress
    from genie.engine.diagnose import DiagnoseRequest, run_diagnose
    from genie.report.diagnose import format_diagnosis, write_diagnosis
    from genie.report.rundir import new_run_dir
    from genie.testbed import service

    try:
        bandwidth_bytes = parse_size_bytes(size)
    except ValueError as exc:
        raise InputError(str(exc), path="--size") from None
    if iters < 1:
        raise InputError("must be >= 1", path="--iters")
    info = service.load_info(testbed)
    with count_progress("diagnose", "tests") as progress:
        result = run_diagnose(info, DiagnoseRequest(bandwidth_bytes=bandwidth_bytes, bandwidth_iterations=iters),
                              on_pids=lambda pids: service.register_pids(info.name, pids), progress=progress)
    run_dir = new_run_dir("diagnose", out=out)
    write_diagnosis(run_dir, result)
    typer.echo(format_diagnosis(result))
    typer.echo(f"# results in {run_dir}")
    if result.flagged:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("diagnose")(diagnose)
