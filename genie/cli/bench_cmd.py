"""`genie bench`: nccl-tests for genie. Parses options, calls the bench service, prints the table."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import typer

from genie.cli import options

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.units import parse_size_bytes

if TYPE_CHECKING:
    from genie.core.testbed import TestbedInfo
    from genie.engine.launch import RankPlacement
    from genie.report.manifest import InputDigest


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


@dataclass(frozen=True)
class Target:
    """Where a run happens: rank placements, the PID registrar, the testbed (None for loopback), and what the
    run directory's manifest says about it."""

    placements: list[RankPlacement]
    on_pids: Optional[Callable[[list[int]], None]]
    name: str
    info: Optional[TestbedInfo] = None
    inputs: tuple[InputDigest, ...] = ()  # the topology's digest
    shaper: Optional[str] = None
    topology: Optional[dict[str, Any]] = None


@contextlib.contextmanager
def _target(topology: Optional[Path], testbed: Optional[str], loopback: bool, ranks: Optional[int]) -> Iterator[Target]:
    """The chosen target; a --topology testbed lives only inside this block."""
    from genie.engine import bench
    from genie.report.manifest import InputDigest, input_digest, topology_summary

    chosen = sum(x is not None and x is not False for x in (topology, testbed, loopback or None))
    if chosen != 1:
        raise InputError("give exactly one of --topology FILE, --testbed NAME, --loopback "
                         "(or --inventory FILE with --launcher mpi)", path="bench")
    if loopback:
        yield Target(bench.loopback_placements(ranks or 2), None, "loopback")
        return
    from genie.testbed import service
    from genie.testbed.state import load_record

    if testbed is not None:
        info = service.load_info(testbed)
        record = load_record(testbed)
        yield Target(bench.placements_for(info, ranks), (lambda pids: service.register_pids(info.name, pids)),
                     info.name, info, (InputDigest("topology", record.source or f"testbed {info.name}",
                                                   record.source_digest, 1),),
                     info.shaper, topology_summary(info.topology))
        return
    from genie.topology import load_topology_file

    topo = load_topology_file(topology)
    digest = input_digest(topology, "topology")
    with service.temporary_testbed(topo, source=str(topology)) as info:
        yield Target(bench.placements_for(info, ranks), (lambda pids: service.register_pids(info.name, pids)),
                     info.name, info, (digest,), info.shaper, topology_summary(info.topology))


@contextlib.contextmanager
def _placements(topology: Optional[Path], testbed: Optional[str], loopback: bool, ranks: Optional[int]) -> Iterator:
    """Yield (placements, on_pids, testbed name) for the chosen target (kept for other commands)."""
    with _target(topology, testbed, loopback, ranks) as t:
        yield t.placements, t.on_pids, t.name


def _observe(run, target: Target, sample_ms: int):
    """Link counters, TCP counters and link samples of a testbed run (nothing for loopback)."""
    from genie.report.observe import observe_links

    if target.info is None:
        return observe_links(run, None, None)
    from genie.testbed import netlink

    return observe_links(run, target.info, netlink, interval_s=sample_ms / 1e3)


def _capture_end(target: Target, spec: Optional[str]):
    """--capture LINK checked against the target before anything runs (InputError: exit code 2)."""
    from genie.report.capture import capture_end

    return capture_end(target.info, spec)


def _echo_capture(capture, err: bool) -> None:
    if capture is not None:
        from genie.report.capture import summary_line

        typer.echo(summary_line(capture.result), err=err)


def _devices(target: Target) -> list[dict]:
    return [{"rank": p.rank, "host": p.host, "netns": p.netns} for p in target.placements]


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
    topology: Optional[Path] = options.TOPOLOGY,
    testbed: Optional[str] = options.TESTBED,
    loopback: bool = options.LOOPBACK,
    ranks: Optional[int] = typer.Option(None, "--ranks", help="Number of ranks (default: all of the testbed)."),
    verify: bool = typer.Option(False, "--verify", help="Move real data and check the results with numpy."),
    chunks: int = typer.Option(1, "--chunks", help="Pipelining chunks per algorithm step."),
    timeout: float = options.TIMEOUT,
    steps: bool = typer.Option(False, "--steps", help="Also record every algorithm step (steps.csv)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-bench)."),
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
    """Sweep collectives over sizes and print an nccl-tests table; writes a run directory (docs/reports.md)."""
    from genie.cli.launch_options import check_launch, launch_meta, launch_target, other_target, resolve_launch
    from genie.cli.progress import bench_progress
    from genie.engine import bench as service
    from genie.faults import service as faults_service
    from genie.report import sweep
    from genie.report.capture import capture_link
    from genie.report.manifest import RunRecorder
    from genie.report.sweep_recorder import SweepRecorder

    try:
        algo = Algorithm.parse(algorithm)
    except ValueError as exc:
        raise InputError(str(exc), path="--algorithm") from None
    request = service.BenchRequest(
        collectives=_parse_collectives(collective), algorithm=algo,
        min_bytes=_parse_size(minbytes, "--minbytes"), max_bytes=_parse_size(maxbytes, "--maxbytes"),
        factor=stepfactor, iterations=iters, warmup=warmup_iters, ranks=ranks, verify=verify, timeout_s=timeout,
        record_steps=steps, chunks=chunks)
    if sample_ms < 0:
        raise InputError("must be >= 0", path="--sample-ms")
    config = {"min_bytes": request.min_bytes, "max_bytes": request.max_bytes, "step_factor": stepfactor,
              "warmup_iters": warmup_iters, "iterations": iters, "verify": verify}
    faults = faults_service.read_faults(faults_file, fault)
    choice = resolve_launch(launcher, transport, inventory, mpiexec, ranks=ranks, port_range=port_range,
                            other_target=other_target(topology, testbed, loopback))
    faults_service.check_launcher(faults, choice.sessions is None)
    faults_service.precheck_topology(faults, topology,
                                     lambda n: faults_service.bench_bounds(service.build_job(request, ranks or n)))
    with launch_target(choice, inventory, lambda: _target(topology, testbed, loopback, ranks)) as target:
        job = service.build_job(request, len(target.placements))  # validate before anything starts
        check_launch(choice, target.placements)
        fault_plan = faults_service.plan(faults, target.info, faults_service.bench_bounds(job))
        capture_end = _capture_end(target, capture)
        meta = {"target": target.name, "ranks": len(target.placements), "verify": verify, "iterations": iters,
                "warmup": warmup_iters}
        with RunRecorder("bench", out=out, inputs=target.inputs,
                         params={**config, "algorithm": algorithm, "chunks": chunks, "steps": steps,
                                 "launcher": launcher, "transport": transport,
                                 **({"capture": capture} if capture else {}),
                                 **({"faults": fault_plan.specs()} if fault_plan else {})}) as run:
            run.describe(target=target.name, shaper=target.shaper, topology=target.topology)
            files = SweepRecorder(run, meta)
            with capture_link(run, capture_end) as capturing, _observe(run, target, sample_ms) as observer, \
                    bench_progress() as bar, \
                    faults_service.inject_faults(run, fault_plan, target.info, target.on_pids) as injector:
                outcome = service.run_bench(request, target.placements, on_pids=target.on_pids,
                                            progress=lambda d, t, s: (bar(d, t, s), files.add(d, t, s)),
                                            sessions=choice.sessions, fault_hooks=injector,
                                            fault_points=fault_plan.fault_points())
            if choice.sessions is not None:
                run.write("launch.json", json.dumps(launch_meta(launcher, transport, choice), indent=2))
            doc = files.finish(outcome, config=config, devices=_devices(target), steps=steps)
            links = observer.observation.summary() if observer else None
            run.set_summary({"cases": len(outcome.stats), **(links or {}),
                             **(capturing.result.summary() if capturing else {})})
    rate = (target.topology or {}).get("link_rate_bps")
    summary = sweep.end_summary(outcome.stats, run.run_dir, duration_s=run.manifest.duration_s,
                                link_rate_bps=rate, links=links)
    if as_json:
        typer.echo(json.dumps({"run_dir": str(run.run_dir), "status": run.status.value, **doc}, indent=2))
        typer.echo(summary, err=True)
    else:
        typer.echo(sweep.format_table(outcome.stats))
        typer.echo(summary)
    _echo_capture(capturing, err=as_json)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
