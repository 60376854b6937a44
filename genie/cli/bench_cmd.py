"""`genie bench`: nccl-tests for genie. Parses options, calls the bench service, prints the table."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, Optional

import typer

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.units import parse_size_bytes


def _parse_size(text: str, option: str) -> int:
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
    return tuple(out) or (Collective.ALL_REDUCE,)


@contextlib.contextmanager
def _placements(topology: Optional[Path], testbed: Optional[str], loopback: bool, ranks: Optional[int]) -> Iterator:
    """Yield (placements, on_pids, testbed name) for the chosen target; a --topology testbed lives only here."""
    from genie.engine import bench

    chosen = sum(x is not None and x is not False for x in (topology, testbed, loopback or None))
    if chosen != 1:
        raise InputError("give exactly one of --topology FILE, --testbed NAME, --loopback", path="bench")
    if loopback:
        yield bench.loopback_placements(ranks or 2), None, "loopback"
        return
    from genie.testbed import service

    if testbed is not None:
        info = service.load_info(testbed)
        yield bench.placements_for(info, ranks), (lambda pids: service.register_pids(info.name, pids)), info.name
        return
    from genie.topology import load_topology_file

    topo = load_topology_file(topology)
    with service.temporary_testbed(topo, source=str(topology)) as info:
        yield bench.placements_for(info, ranks), (lambda pids: service.register_pids(info.name, pids)), info.name


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
    topology: Optional[Path] = typer.Option(None, "--topology", help="Bring this topology up for the run."),
    testbed: Optional[str] = typer.Option(None, "--testbed", help="Use a testbed that is already up."),
    loopback: bool = typer.Option(False, "--loopback", help="All ranks on 127.0.0.1 here (no testbed, no root)."),
    ranks: Optional[int] = typer.Option(None, "--ranks", help="Number of ranks (default: all of the testbed)."),
    verify: bool = typer.Option(False, "--verify", help="Move real data and check the results with numpy."),
    chunks: int = typer.Option(1, "--chunks", help="Pipelining chunks per algorithm step."),
    timeout: float = typer.Option(60.0, "--timeout", help="Per-op timeout in seconds."),
    steps: bool = typer.Option(False, "--steps", help="Also record every algorithm step (steps.csv)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-bench)."),
) -> None:
    """Sweep collectives over sizes and print an nccl-tests table; writes sweep.csv and sweep.json."""
    from genie.cli.progress import bench_progress
    from genie.engine import bench as service
    from genie.report import sweep
    from genie.report.rundir import new_run_dir

    try:
        algo = Algorithm.parse(algorithm)
    except ValueError as exc:
        raise InputError(str(exc), path="--algorithm") from None
    request = service.BenchRequest(
        collectives=_parse_collectives(collective), algorithm=algo,
        min_bytes=_parse_size(minbytes, "--minbytes"), max_bytes=_parse_size(maxbytes, "--maxbytes"),
        factor=stepfactor, iterations=iters, warmup=warmup_iters, ranks=ranks, verify=verify, timeout_s=timeout,
        record_steps=steps, chunks=chunks)
    with _placements(topology, testbed, loopback, ranks) as (placements, on_pids, target):
        service.build_job(request, len(placements))  # validate before anything starts
        with bench_progress() as progress:
            outcome = service.run_bench(request, placements, on_pids=on_pids, progress=progress)
    run_dir = new_run_dir("bench", out=out)
    sweep.write_sweep(run_dir, outcome.stats, meta={"target": target, "ranks": len(placements),
                                                    "verify": verify, "iterations": iters, "warmup": warmup_iters})
    if steps:
        sweep.write_steps(run_dir, outcome)
    typer.echo(sweep.format_table(outcome.stats))
    typer.echo(f"# results in {run_dir}")


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
