"""`genie replay TRACE`: replay a whole workload on a testbed and write its timeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from genie.cli import options

from genie.core.errors import InputError


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
    from genie.cli.bench_cmd import _capture_end, _echo_capture, _observe, _target
    from genie.cli.launch_options import check_launch, launch_meta, launch_target, other_target, resolve_launch
    from genie.cli.progress import count_progress
    from genie.engine.program import build_programs
    from genie.engine.replay import ReplayRequest, check_fits, run_replay
    from genie.faults import service as faults_service
    from genie.report.capture import capture_link
    from genie.report.manifest import RunRecorder, input_digest
    from genie.report.replay import end_summary, format_summary, replay_files
    from genie.workloads.analysis import check
    from genie.workloads.loader import load_trace

    if sample_ms < 0:
        raise InputError("must be >= 0", path="--sample-ms")
    faults = faults_service.read_faults(faults_file, fault)
    loaded = load_trace(trace, npus=npus)
    check(loaded, source=str(trace))
    request = ReplayRequest(iterations=iterations, warmup=warmup, timeout_s=timeout)
    ranks = loaded.num_ranks
    digest = input_digest(trace, "trace")
    choice = resolve_launch(launcher, transport, inventory, mpiexec, port_range=port_range, replay=True,
                            other_target=other_target(topology, testbed, loopback))
    faults_service.check_launcher(faults, choice.sessions is None)
    bounds = faults_service.replay_bounds(build_programs(loaded, source=str(trace)) if faults else (), iterations,
                                          warmup, timeout, faults)
    faults_service.precheck_topology(faults, topology, lambda _ranks: bounds)
    with launch_target(choice, inventory,
                       lambda: _target(topology, testbed, loopback, None if not loopback else ranks)) as target:
        check_launch(choice, check_fits(loaded, target.placements, source=str(trace)))
        fault_plan = faults_service.plan(faults, target.info, bounds)
        capture_end = _capture_end(target, capture)
        params = {"iterations": iterations, "warmup": warmup, "npus": npus, "ranks": ranks, "launcher": launcher,
                  "transport": transport,
                  **({"capture": capture} if capture else {}),
                  **({"faults": fault_plan.specs()} if fault_plan else {})}
        with RunRecorder("replay", out=out, inputs=(digest, *target.inputs), params=params) as run:
            run.describe(target=target.name, shaper=target.shaper, topology=target.topology)
            with capture_link(run, capture_end) as capturing, _observe(run, target, sample_ms) as observer, \
                    count_progress("replay", "iteration") as progress, \
                    faults_service.inject_faults(run, fault_plan, target.info, target.on_pids) as injector:
                outcome = run_replay(loaded, target.placements, request, source=str(trace), on_pids=target.on_pids,
                                     progress=progress, sessions=choice.sessions, fault_hooks=injector,
                                     fault_points=fault_plan.fault_points(),
                                     stragglers=faults_service.stragglers_by_rank(fault_plan))
            if choice.sessions is not None:
                run.write("launch.json", json.dumps(launch_meta(launcher, transport, choice), indent=2))
            doc, files = replay_files(outcome, {"trace": str(trace), "target": target.name, "ranks": ranks,
                                                "iterations": iterations, "warmup": warmup})
            for name, text in files.items():
                run.write(name, text)
            links = observer.observation.summary() if observer else None
            run.set_summary({"iteration_median_ns": doc["iteration_median_ns"], **(links or {}),
                             **(capturing.result.summary() if capturing else {})})
    summary = end_summary(doc, run.run_dir, links)
    if as_json:
        typer.echo(json.dumps({"run_dir": str(run.run_dir), "status": run.status.value, **doc}, indent=2))
        typer.echo(summary, err=True)
    else:
        typer.echo(format_summary(outcome))
        typer.echo(summary)
    _echo_capture(capturing, err=as_json)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)
