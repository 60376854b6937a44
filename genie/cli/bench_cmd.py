"""`genie bench`: nccl-tests for genie. Parses options, calls the bench service, prints the table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from genie.cli import options
from genie.cli.flags import RUN_FLAGS, flag_names
from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.units import parse_size_bytes

#: BenchRequest fields -> flags
BENCH_FLAGS = {**RUN_FLAGS, "collectives": "--collective", "algorithm": "--algorithm", "min_bytes": "--minbytes",
               "max_bytes": "--maxbytes", "factor": "--stepfactor", "iterations": "--iters",
               "warmup": "--warmup_iters", "ranks": "--ranks", "chunks": "--chunks"}


def parse_size(text: str, option: str) -> int:
    try:
        return parse_size_bytes(text)
    except ValueError as exc:
        raise InputError(str(exc), path=option) from None


def _parse_collectives(values: list[str]) -> tuple[Collective, ...]:
    out: list[Collective] = []
    for value in values:
        for part in value.split(","):
            if part.strip():
                try:
                    out.append(Collective.parse(part))
                except ValueError as exc:
                    raise InputError(str(exc), path="--collective") from None
    return tuple(out)  # `-c ""` names no collective: the service refuses it


def echo_capture(capture, err: bool) -> None:
    """The capture's one-line summary (nothing when no link was captured)."""
    if capture is not None:
        from genie.report.capture import summary_line

        typer.echo(summary_line(capture), err=err)


@options.run_options()
def bench(
    collective: list[str] = typer.Option(["all_reduce"], "--collective", "-c",
                                         help="all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, "
                                              "send_recv (repeat or comma-separate)."),
    algorithm: str = typer.Option("auto", "--algorithm", "-a", help="auto, ring, direct, halving_doubling, "
                                                                     "double_binary_tree, pipelined_ring, p2p."),
    minbytes: str = typer.Option("1K", "--minbytes", "-b", help="Smallest size (nccl-tests convention)."),
    maxbytes: str = typer.Option("1M", "--maxbytes", "-e", help="Largest size."),
    stepfactor: int = typer.Option(2, "--stepfactor", "-f", help="Multiply the size by this factor."),
    iters: int = typer.Option(20, "--iters", "-n", help="Timed iterations per size."),
    warmup_iters: int = typer.Option(5, "--warmup_iters", "-w", help="Untimed warmup iterations per size."),
    ranks: Optional[int] = typer.Option(None, "--ranks", help="Number of ranks (default: all of the testbed)."),
    verify: bool = typer.Option(False, "--verify", help="Move real data and check the results with numpy."),
    chunks: int = typer.Option(1, "--chunks", help="Pipelining chunks per algorithm step."),
    timeout: float = options.TIMEOUT,
    steps: bool = typer.Option(False, "--steps", help="Also record every algorithm step (steps.csv)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-bench)."),
    as_json: bool = options.AS_JSON,
    *, run,
) -> None:
    """Sweep collectives over sizes and print an nccl-tests table; writes a run directory (docs/reports.md)."""
    from genie.cli.progress import bench_progress
    from genie.report import sweep
    from genie.services.bench import BenchCommand, BenchRequest, run_bench_command

    try:
        algo = Algorithm.parse(algorithm)
    except ValueError as exc:
        raise InputError(str(exc), path="--algorithm") from None
    request = BenchRequest(
        collectives=_parse_collectives(collective), algorithm=algo,
        min_bytes=parse_size(minbytes, "--minbytes"), max_bytes=parse_size(maxbytes, "--maxbytes"),
        factor=stepfactor, iterations=iters, warmup=warmup_iters, ranks=ranks, verify=verify, timeout_s=timeout,
        record_steps=steps, chunks=chunks)
    with flag_names(BENCH_FLAGS):
        result = run_bench_command(BenchCommand(request, run), progress=bench_progress)
    summary = sweep.end_summary(result.outcome.stats, result.run_dir, duration_s=result.duration_s,
                                link_rate_bps=result.link_rate_bps, links=result.links)
    if as_json:
        typer.echo(json.dumps({"run_dir": str(result.run_dir), "status": result.status.value, **result.doc},
                              indent=2))
        typer.echo(summary, err=True)
    else:
        typer.echo(sweep.format_table(result.outcome.stats))
        typer.echo(summary)
    echo_capture(result.capture, err=as_json)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
