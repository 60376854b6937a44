"""`genie diagnose`: find slow links and hosts of a testbed from a pairwise latency/bandwidth matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from genie.cli import options
from genie.cli.flags import flag_names

#: DiagnoseRequest fields -> flags
DIAGNOSE_FLAGS = {"bandwidth_bytes": "--size", "latency_bytes": "--size", "bandwidth_iterations": "--iterations",
                  "out": "--out", "time_dilation": "--time-dilation"}


def diagnose(
    testbed: str = typer.Option(..., "--testbed", help="A testbed that is up."),
    size: Optional[str] = typer.Option(
        None, "--size", help="Message size of the bandwidth test (default 8M; under time dilation the largest power "
        "of two up to 8M whose transfer lasts at most 0.5 s real: docs/diagnose.md)."),
    iters: int = typer.Option(3, "--iterations", "--iters", "-n", help="Bandwidth iterations per pair."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-diagnose)."),
    time_dilation: Optional[str] = options.TIME_DILATION,
) -> None:
    """Measure every host pair, flag outliers against the configuration and the median; exit 1 when flagged."""
    from genie.cli.bench_cmd import parse_size
    from genie.cli.progress import count_progress
    from genie.report.diagnose import format_diagnosis
    from genie.services.diagnose import DiagnoseCommand, DiagnoseRequest, run_diagnose_command

    from genie.core.dilation import DilationChoice

    request = DiagnoseRequest(bandwidth_bytes=None if size is None else parse_size(size, "--size"),
                              bandwidth_iterations=iters)
    with flag_names(DIAGNOSE_FLAGS):
        dilation = DilationChoice.parse(time_dilation)
        result = run_diagnose_command(DiagnoseCommand(testbed, request, out, dilation),
                                      progress=lambda: count_progress("diagnose", "tests"),
                                      notice=lambda line: typer.echo(line, err=True))
    typer.echo(format_diagnosis(result.diagnosis))
    typer.echo(f"# results in {result.run_dir}")
    if result.diagnosis.flagged:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("diagnose")(diagnose)
