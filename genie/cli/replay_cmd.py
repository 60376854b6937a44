"""`genie replay TRACE`: replay a whole workload on a testbed and write its timeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from genie.cli import options
from genie.cli.flags import RUN_FLAGS, flag_names

#: ReplayRequest fields -> flags
REPLAY_FLAGS = {**RUN_FLAGS, "iterations": "--iterations", "warmup": "--warmup", "npus": "--npus"}


@options.run_options()
def replay(
    trace: Optional[Path] = typer.Argument(None, help="Trace: Chakra ET prefix or directory, genie JSON/YAML, "
                                                      "PARAM dir, ASTRA-sim text (with --npus); or --jobs."),
    npus: Optional[int] = typer.Option(None, "--npus", help="Ranks for an ASTRA-sim text workload."),
    iterations: int = typer.Option(1, "--iterations", "--iters", "-n",
                                         help="Timed iterations of the whole trace."),
    warmup: int = typer.Option(0, "--warmup", "--warmup_iters", "-w", help="Untimed iterations first."),
    timeout: float = options.TIMEOUT,
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-replay)."),
    as_json: bool = options.AS_JSON,
    jobs: Optional[Path] = typer.Option(None, "--jobs", help="A job mix (docs/jobs.md) instead of TRACE: every "
                                                             "job at once on one target, and each alone."),
    alone: bool = typer.Option(True, "--alone/--no-alone", help="With --jobs: also replay each job alone on "
                                                                "its placement (its slowdown is measured)."),
    *, run,
) -> None:
    """Replay TRACE: compute waited out, communication sent for real; writes a run directory (docs/reports.md)."""
    if jobs is not None:
        from genie.cli.mix_cmd import replay_mix
        return replay_mix(trace, jobs, run, iterations=iterations, warmup=warmup, timeout=timeout, alone=alone,
                          as_json=as_json)
    if trace is None:
        from genie.core.errors import InputError
        raise InputError("give a TRACE (or --jobs FILE)")
    from genie.cli.bench_cmd import echo_capture
    from genie.cli.progress import count_progress
    from genie.report.replay import end_summary, format_summary
    from genie.services.replay import ReplayCommand, ReplayRequest, run_replay_command

    command = ReplayCommand(trace, ReplayRequest(iterations=iterations, warmup=warmup, timeout_s=timeout), run,
                            npus=npus)
    with flag_names(REPLAY_FLAGS):
        result = run_replay_command(command, progress=lambda: count_progress("replay", "iteration"))
    summary = end_summary(result.doc, result.run_dir, result.links)
    if as_json:
        typer.echo(json.dumps({"run_dir": str(result.run_dir), "status": result.status.value, **result.doc},
                              indent=2))
        typer.echo(summary, err=True)
    else:
        typer.echo(format_summary(result.outcome))
        typer.echo(summary)
    if result.dilation.active:  # one clock for the whole trace: say which factor, and what chose it
        typer.echo(f"# {result.dilation.describe()}; a replay runs the whole trace at one factor "
                   "(docs/dilation.md: what a smaller one costs)", err=as_json)
    echo_capture(result.capture, err=as_json)
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)
