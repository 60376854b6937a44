"""`genie replay TRACE`: replay a whole workload on a testbed and write its timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def replay(
    trace: Path = typer.Argument(..., help="Trace: Chakra ET prefix or directory, genie JSON/YAML, PARAM dir, "
                                           "ASTRA-sim text (with --npus)."),
    topology: Optional[Path] = typer.Option(None, "--topology", help="Bring this topology up for the run."),
    testbed: Optional[str] = typer.Option(None, "--testbed", help="Use a testbed that is already up."),
    loopback: bool = typer.Option(False, "--loopback", help="All ranks on 127.0.0.1 here (no testbed, no root)."),
    npus: Optional[int] = typer.Option(None, "--npus", help="Ranks for an ASTRA-sim text workload."),
    iterations: int = typer.Option(1, "--iterations", "-n", help="Timed iterations of the whole trace."),
    warmup: int = typer.Option(0, "--warmup", "-w", help="Untimed iterations first."),
    timeout: float = typer.Option(60.0, "--timeout", help="Per-op timeout in seconds."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-replay)."),
) -> None:
    """Replay TRACE: compute waited out, communication sent for real; writes ops.csv, ranks.csv, timeline.json."""
    from genie.cli.bench_cmd import _placements
    from genie.cli.progress import count_progress
    from genie.engine.replay import ReplayRequest, run_replay
    from genie.report.replay import format_summary, write_replay
    from genie.report.rundir import new_run_dir
    from genie.workloads.analysis import check
    from genie.workloads.loader import load_trace

    loaded = load_trace(trace, npus=npus)
    check(loaded, source=str(trace))
    request = ReplayRequest(iterations=iterations, warmup=warmup, timeout_s=timeout)
    ranks = loaded.num_ranks
    with _placements(topology, testbed, loopback, None if not loopback else ranks) as (placements, on_pids, target):
        with count_progress("replay", "iteration") as progress:
            outcome = run_replay(loaded, placements, request, source=str(trace), on_pids=on_pids,
                                 progress=progress)
    run_dir = new_run_dir("replay", out=out)
    write_replay(run_dir, outcome, {"trace": str(trace), "target": target, "ranks": ranks,
                                    "iterations": iterations, "warmup": warmup})
    typer.echo(format_summary(outcome))
    typer.echo(f"# results in {run_dir}")


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)
