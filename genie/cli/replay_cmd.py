"""`genie replay TRACE`: replay a whole workload on a testbed and write its timeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from genie.cli import options



def replay(
    trace: Path = typer.Argument(..., help="Trace: Chakra ET prefix or directory, genie JSON/YAML, PARAM dir, "
                                           "ASTRA-sim text (with --npus)."),
    topology: Optional[Path] = options.TOPOLOGY,
    testbed: Optional[str] = options.TESTBED,
    loopback: bool = options.LOOPBACK,
    npus: Optional[int] = typer.Option(None, "--npus", help="Ranks for an ASTRA-sim text workload."),
    iterations: int = typer.Option(1, "--iterations", "-n", help="Timed iterations of the whole trace."),
    warmup: int = typer.Option(0, "--warmup", "-w", help="Untimed iterations first."),
    timeout: float = options.TIMEOUT,
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-replay)."),
    sample_ms: int = options.SAMPLE_MS,
    capture: Optional[str] = options.CAPTURE,
    launcher: str = options.LAUNCHER,
    transport: str = options.TRANSPORT,
    inventory: Optional[Path] = options.INVENTORY,
    mpiexec: Optional[Path] = options.MPIEXEC,
    port_range: Optional[str] = options.PORT_RANGE,
    faults_file: Optional[Path] = options.FAULTS,
    fault: list[str] = options.FAULT,
    as_json: bool = options.AS_JSON,
) -> None:
    """Replay TRACE: compute waited out, communication sent for real; writes a run directory (docs/reports.md)."""
    from genie.cli.bench_cmd import echo_capture
    from genie.cli.progress import count_progress
    from genie.engine.replay import ReplayRequest
    from genie.report.replay import end_summary, format_summary
    from genie.runs.options import RunOptions
    from genie.runs.replay_run import ReplayCommand, run_replay_command

    run_options = RunOptions(topology=topology, testbed=testbed, loopback=loopback, launcher=launcher,
                             transport=transport, inventory=inventory, mpiexec=mpiexec, port_range=port_range,
                             out=out, sample_ms=sample_ms, capture=capture, faults_file=faults_file,
                             faults=tuple(fault))
    command = ReplayCommand(trace, ReplayRequest(iterations=iterations, warmup=warmup, timeout_s=timeout),
                            run_options, npus=npus)
    result = run_replay_command(command, progress=lambda: count_progress("replay", "iteration"))
    summary = end_summary(result.doc, result.run.run_dir, result.links)
    if as_json:
        typer.echo(json.dumps({"run_dir": str(result.run.run_dir), "status": result.run.status.value,
                               **result.doc}, indent=2))
        typer.echo(summary, err=True)
    else:
        typer.echo(format_summary(result.outcome))
        typer.echo(summary)
    echo_capture(result.capture, err=as_json)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)
