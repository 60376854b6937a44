"""`genie bench`: nccl-tests for genie. Parses options (nccl-tests' flags with nccl-tests' meanings, genie's long
options beside them), calls the bench service, prints nccl-tests' table row by row as each size finishes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from genie.cli import options
from genie.cli.flags import RUN_FLAGS, flag_names
from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.units import parse_nccl_size_bytes, parse_size_bytes

#: BenchRequest fields -> flags
BENCH_FLAGS = {**RUN_FLAGS, "osu": "--osu", "pairs": "--ranks", "collectives": "--collective",
               "algorithm": "--algorithm", "min_bytes": "--minbytes",
               "max_bytes": "--maxbytes", "factor": "--stepfactor", "step_bytes": "--stepbytes", "iterations": "--iterations",
               "warmup": "--warmup", "ranks": "--ranks", "chunks": "--chunks", "root": "--root"}

#: nccl-tests options that have no meaning on genie's CPU ranks: accepted, a warning when not 0
_NO_MEANING = {"blocking": "-z", "cudagraph": "-G", "local_register": "-R", "parallel_init": "-p",
               "stream_null": "-y", "unalign": "-u", "memory": "-M"}
_FLOAT_TYPES = ("float", "float32", "f32")


def parse_size(text: str, option: str) -> int:
    """genie's size convention (K = 1024, KB = 1000): --size and the other non-nccl-tests options."""
    try:
        return parse_size_bytes(text)
    except ValueError as exc:
        raise InputError(str(exc), path=option) from None


def parse_nccl_size(text: str, option: str) -> int:
    """nccl-tests' -b/-e convention: K, M, G (with or without B) are powers of 1024."""
    try:
        return parse_nccl_size_bytes(text)
    except ValueError as exc:
        raise InputError(str(exc), path=option) from None


def _parse_collectives(values: list[str]) -> tuple[Collective, ...]:
    """The --collective values (repeated or comma-separated); none given: all_reduce."""
    if not values:
        return (Collective.ALL_REDUCE,)
    out: list[Collective] = []
    for value in values:
        for part in value.split(","):
            if part.strip():
                try:
                    out.append(Collective.parse(part))
                except ValueError as exc:
                    raise InputError(str(exc), path="--collective") from None
    return tuple(out)  # `-c ""` names no collective: the service refuses it


def _check_count(check: str, collective: list[str]) -> int:
    """-c is nccl-tests' --check (an integer); a collective name there (genie's old -c) still selects it."""
    try:
        return int(check)
    except ValueError:
        pass
    if not _parse_collectives([check]):  # an error names --collective when it is not a collective either
        raise InputError("names no collective; expected at least one (such as all_reduce)", path="--collective")
    typer.echo(f"genie bench: -c {check}: -c is nccl-tests' --check count; use --collective {check}", err=True)
    collective.append(check)
    return 1


def echo_capture(capture, err: bool) -> None:
    """The capture's one-line summary (nothing when no link was captured)."""
    if capture is not None:
        from genie.report.capture import summary_line

        typer.echo(summary_line(capture), err=err)


def _warn(text: str) -> None:
    typer.echo(f"genie bench: {text}", err=True)


def _check_nccl_options(*, op: str, datatype: str, average: Optional[int], agg_iters: int, run_cycles: int,
                        ignored: dict[str, int]) -> None:
    if op.lower() != "sum":
        raise InputError(f"genie's ranks reduce with sum only, got {op!r}", path="-o/--op")
    if datatype.lower() not in _FLOAT_TYPES:
        raise InputError(f"genie's ranks move 4-byte float elements (-d float), got {datatype!r}",
                         path="-d/--datatype")
    if run_cycles != 1:
        raise InputError("genie runs the sweep once (-N 1); repeat the command for more cycles",
                         path="-N/--run_cycles")
    if average is not None and average != 1:
        _warn(f"-a {average}: genie's time is the group's timed loop (until its last rank) / iterations, "
              "whatever -a says")
    if agg_iters != 1:
        _warn(f"-m {agg_iters}: genie launches one collective per iteration (agg iters: 1)")
    for name, value in ignored.items():
        if value:
            _warn(f"{_NO_MEANING[name]} {value} (--{name}) has no meaning on CPU ranks; ignored")


@options.run_options()
def bench(
    collective: list[str] = typer.Option([], "--collective", show_default="all_reduce",
                                         help="all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, "
                                              "send_recv (repeat or comma-separate)."),
    algorithm: str = typer.Option("auto", "--algorithm", help="auto, ring, direct, halving_doubling, "
                                                              "double_binary_tree, pat, pipelined_ring, p2p."),
    minbytes: str = typer.Option("1K", "--minbytes", "-b", help="Smallest size (K, M, G = 1024^n, as nccl-tests)."),
    maxbytes: str = typer.Option("1M", "--maxbytes", "-e", help="Largest size."),
    stepfactor: int = typer.Option(2, "--stepfactor", "-f", help="Multiply the size by this factor."),
    stepbytes: str = typer.Option("0", "--stepbytes",
                                  help="Add this size instead of multiplying (nccl-tests' -i; -i here is "
                                       "--interval, as iperf3's)."),
    iterations: int = typer.Option(20, "--iterations", "--iters", "-n", help="Timed iterations per size."),
    warmup: int = typer.Option(5, "--warmup", "--warmup_iters", "-w", help="Untimed warmup iterations per size."),
    ranks: Optional[int] = typer.Option(None, "--ranks", help="Number of ranks (default: all of the testbed)."),
    nthreads: int = typer.Option(1, "--nthreads", "-t", help="nccl-tests' -t: ranks = t x g (when --ranks is not "
                                                             "given; a genie rank is a process)."),
    ngpus: int = typer.Option(1, "--ngpus", "-g", help="nccl-tests' -g: ranks = t x g."),
    check: str = typer.Option("1", "--check", "-c", help="Check iterations (nccl-tests' -c): after the timed loop, "
                                                       "move real data once and check it; 0: off."),
    verify: bool = typer.Option(False, "--verify", help="Same as -c 1 (the default)."),
    op: str = typer.Option("sum", "--op", "-o", help="Reduction (sum only)."),
    datatype: str = typer.Option("float", "--datatype", "-d", help="Element type (float only)."),
    root: int = typer.Option(0, "--root", "-r", help="Broadcast's root rank."),
    average: Optional[int] = typer.Option(None, "--average", "-a", help="nccl-tests' -a: accepted; genie's time "
                                                                        "is the group's (docs/reports.md)."),
    agg_iters: int = typer.Option(1, "--agg_iters", "-m", help="Aggregated iterations (1 only; others warn)."),
    run_cycles: int = typer.Option(1, "--run_cycles", "-N", help="Cycles (1 only)."),
    per_iter_timing: int = typer.Option(0, "--per_iter_timing", "-I",
                                        help="1: add nccl-tests' per-iteration columns (i_min i_max i_p99 i_cv%)."),
    report_cputime: int = typer.Option(0, "--report_cputime", "-C", help="1: title the time column cputime."),
    output_file: Optional[Path] = typer.Option(None, "--output_file", "-J",
                                               help="Also write the nccl-tests JSON here (one collective)."),
    in_place: bool = typer.Option(True, "--in-place/--no-in-place",
                                  help="Measure the in-place columns (a second pass per size, as nccl-tests)."),
    osu: Optional[str] = typer.Option(None, "--osu", metavar="TEST",
                                      help="OSU point-to-point test instead: latency, bw, bibw, mbw_mr (OSU's "
                                           "table; docs/reports.md)."),
    interval: float = typer.Option(0.0, "--interval", "-i", metavar="SEC",
                                   help="Every SEC seconds print a '#' line: each link's rate, each host's TCP "
                                        "segments/retransmissions, cwnd and RTT (iperf3's -i; testbed only)."),
    genie_columns: bool = typer.Option(False, "--genie-columns",
                                       help="Append genie's algorithm, median and p99 columns to the table."),
    blocking: int = typer.Option(0, "--blocking", "-z", hidden=True),
    cudagraph: int = typer.Option(0, "--cudagraph", "-G", hidden=True),
    local_register: int = typer.Option(0, "--local_register", "-R", hidden=True),
    parallel_init: int = typer.Option(0, "--parallel_init", "-p", hidden=True),
    stream_null: int = typer.Option(0, "--stream_null", "-y", hidden=True),
    unalign: int = typer.Option(0, "--unalign", "-u", hidden=True),
    memory: int = typer.Option(0, "--memory", "-M", hidden=True),
    chunks: int = typer.Option(1, "--chunks", help="Pipelining chunks per algorithm step."),
    timeout: float = typer.Option(60.0, "--timeout", "-T", help="Per-op timeout in seconds."),
    steps: bool = typer.Option(False, "--steps", help="Also record every algorithm step (steps.csv)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-bench)."),
    dry_run: bool = typer.Option(False, "--dry-run",
                                 help="Print the testbed's time dilation per size (auto measures this host "
                                      "first) and the links' real shapes; run nothing."),
    as_json: bool = options.AS_JSON,
    *, run,
) -> None:
    """Sweep collectives over sizes and print nccl-tests' table, a row as each size finishes; writes a run
    directory (docs/reports.md). -z -G -R -p -y -u -M are accepted and ignored (no meaning on CPU ranks)."""
    from genie.cli.progress import bench_progress
    from genie.report import nccl_table, sweep
    from genie.services.bench import BenchCommand, BenchRequest, run_bench_command

    collective = list(collective)
    checks = max(1, _check_count(check, collective)) if verify else _check_count(check, collective)
    _check_nccl_options(op=op, datatype=datatype, average=average, agg_iters=agg_iters, run_cycles=run_cycles,
                        ignored={"blocking": blocking, "cudagraph": cudagraph, "local_register": local_register,
                                 "parallel_init": parallel_init, "stream_null": stream_null, "unalign": unalign,
                                 "memory": memory})
    try:
        algo = Algorithm.parse(algorithm)
    except ValueError as exc:
        raise InputError(str(exc), path="--algorithm") from None
    collectives = _parse_collectives(collective)
    if output_file is not None and len(set(collectives)) > 1:
        raise InputError("nccl-tests' JSON holds one collective: give one --collective with -J", path="-J")
    if interval < 0:
        raise InputError("must be >= 0 seconds", path="--interval")
    if interval > 0 and run.loopback:
        _warn("--interval: loopback has no testbed links to observe; no interval lines")
    if ranks is None and nthreads * ngpus > 1:
        ranks = nthreads * ngpus
    request = BenchRequest(
        collectives=collectives, algorithm=algo,
        min_bytes=parse_nccl_size(minbytes, "--minbytes"), max_bytes=parse_nccl_size(maxbytes, "--maxbytes"),
        factor=stepfactor, step_bytes=parse_nccl_size(stepbytes, "--stepbytes"), iterations=iterations, warmup=warmup, ranks=ranks, verify=checks > 0,
        timeout_s=timeout, record_steps=steps, chunks=chunks, in_place=in_place, root=root,
        cputime=bool(report_cputime))
    config = nccl_table.TableConfig(program="", min_bytes=request.min_bytes, max_bytes=request.max_bytes,
                                    step_factor=stepfactor, warmup_iters=warmup, iterations=iterations,
                                    validation=checks, cputime=bool(report_cputime),
                                    per_iteration=bool(per_iter_timing), extra=genie_columns,
                                    step_bytes=request.step_bytes)
    if osu is not None:
        from genie.measure.osu import OsuTest
        from genie.services.osu import osu_request

        test = OsuTest.parse(osu)
        with flag_names(BENCH_FLAGS):
            request = osu_request(test, request)
        printer = _OsuPrinter(test, request.pairs or 1, enabled=not as_json)
    else:
        printer = _TablePrinter(config, root=root, enabled=not as_json)
    if dry_run:
        from genie.services.bench import plan_bench_dilation

        with flag_names(BENCH_FLAGS):
            plan, topology = plan_bench_dilation(BenchCommand(request, run))
        typer.echo(f"time dilation per size on {topology.name} (dry run, nothing brought up):")
        for line in plan.describe(topology):
            typer.echo(f"  {line}")
        return
    with flag_names(BENCH_FLAGS):
        result = run_bench_command(BenchCommand(request, run), progress=lambda: bench_progress(not sys.stdout.isatty()),
                                   on_start=printer.start, on_row=printer.row, interval_s=interval,
                                   on_interval=(lambda report: typer.echo(report.line(), err=as_json))
                                   if interval > 0 else None)
    printer.finish()
    if output_file is not None and result.nccl_documents:
        from genie.core.files import write_atomic

        write_atomic(output_file, next(iter(result.nccl_documents.values())))
        if not as_json:
            typer.echo(f"# Writing JSON output to {output_file}")
    summary = sweep.end_summary(result.outcome.stats, result.run_dir, duration_s=result.duration_s,
                                link_rate_bps=result.link_rate_bps, links=result.links)
    if as_json:
        typer.echo(json.dumps({"run_dir": str(result.run_dir), "status": result.status.value, **result.doc},
                              indent=2))
    typer.echo(summary, err=as_json)
    if result.burst is not None:
        typer.echo(f"# note: {result.burst.what()}; for a wire: `genie testbed up TOPOLOGY --links wire` and "
                   f"--testbed, or --time-dilation N (docs/dilation.md)", err=as_json)
    if result.cpu_starved is not None:
        typer.echo(f"# note: {result.cpu_starved}", err=as_json)
    if result.dilation_plan is not None:
        typer.echo("# time dilation per size (a rank session per factor, the links reshaped between them; "
                   "docs/dilation.md):", err=as_json)
        for line in result.dilation_plan.reasons():
            typer.echo(f"#   {line}", err=as_json)
    elif result.dilation is not None and result.dilation.active:  # one factor for every size: which, and why
        typer.echo(f"# {result.dilation.describe()}", err=as_json)
    echo_capture(result.capture, err=as_json)
    if printer.failed:
        raise typer.Exit(1)


class _TablePrinter:
    """nccl-tests' stdout, streamed: the header when the ranks are up, each row when its size is done, a footer
    per collective (several collectives read as several nccl-tests binaries run one after the other)."""

    def __init__(self, config, *, root: int, enabled: bool) -> None:
        self.config, self.root, self.enabled = config, root, enabled
        self.devices: list = []
        self.collective = None
        self.rows: list = []
        self.failed = False
        floor = os.environ.get("NCCL_TESTS_MIN_BW")
        self.min_busbw = float(floor) if floor else None

    def start(self, devices: list[dict]) -> None:
        from genie.report.nccl_table import Device

        self.devices = [Device(int(d["rank"]), int(d.get("pid") or 0), str(d.get("host") or "localhost"),
                               f"genie rank (netns {d.get('netns') or '-'})") for d in devices]

    def row(self, out_of_place, in_place) -> None:
        from dataclasses import replace

        from genie.report import nccl_json, nccl_table

        if not self.enabled:
            return
        if out_of_place.collective is not self.collective:
            self._footer()
            self.collective = out_of_place.collective
            self.config = replace(self.config, program=nccl_json.BINARIES[self.collective])
            typer.echo(nccl_table.header(self.config, self.devices))
        self.rows.append((out_of_place, in_place))
        typer.echo(nccl_table.row(out_of_place, in_place, self.config, root_rank=self.root))  # click flushes

    def _footer(self) -> None:
        from genie.report import nccl_table

        if self.rows:
            oop, ip = [r[0] for r in self.rows], [r[1] for r in self.rows]
            typer.echo(nccl_table.footer(oop, ip, self.config.program, min_busbw_GBps=self.min_busbw))
            if self.min_busbw is not None and nccl_table.average_busbw(oop, ip) < 0.9 * self.min_busbw:
                self.failed = True
        self.rows = []

    def finish(self) -> None:
        if self.enabled:
            self._footer()


class _OsuPrinter:
    """OSU's stdout, streamed: its header before the first size, a row as each size is done."""

    failed = False

    def __init__(self, test, pairs: int, *, enabled: bool) -> None:
        self.test, self.pairs, self.enabled, self.started = test, pairs, enabled, False

    def start(self, _devices: list[dict]) -> None:
        pass

    def row(self, stats, _in_place) -> None:
        from genie.measure.osu import osu_row
        from genie.report import osu_table

        if not self.enabled:
            return
        if not self.started:
            self.started = True
            typer.echo(osu_table.header(self.test, pairs=self.pairs))
        typer.echo(osu_table.row(self.test, osu_row(self.test, stats, self.pairs)))

    def finish(self) -> None:
        pass


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
