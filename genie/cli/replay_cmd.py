"""`genie replay TRACE`: replay a whole workload on a testbed and write its timeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from genie.core.errors import InputError


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
    sample_ms: int = typer.Option(200, "--sample-ms", help="Link counter sampling period on a testbed (0: off)."),
    capture: Optional[str] = typer.Option(None, "--capture", metavar="LINK",
                                          help="Record link LINK (e.g. h0-s0: at h0's end) to capture-LINK.pcap "
                                               "and write flows.csv (testbed only)."),
    launcher: str = typer.Option("local", "--launcher",
                                 help="Who starts the ranks: local (genie) or mpi (MPICH's mpiexec; docs/mpi.md)."),
    inventory: Optional[Path] = typer.Option(None, "--inventory",
                                             help="Run on the real hosts of this inventory (docs/inventory.md; "
                                                  "needs --launcher mpi)."),
    mpiexec: Optional[Path] = typer.Option(None, "--mpiexec", help="MPICH's mpiexec (default: beside python, "
                                                                    "then PATH)."),
    port_range: Optional[str] = typer.Option(None, "--port-range",
                                             help="Ports of rank listeners and MPI, LOW-HIGH (default: "
                                                  "$GENIE_PORT_RANGE, else any)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result document as JSON instead of the table."),
) -> None:
    """Replay TRACE: compute waited out, communication sent for real; writes a run directory (docs/reports.md)."""
    from genie.cli.bench_cmd import _capture_end, _echo_capture, _observe, _target
    from genie.cli.launch_options import launch_meta, launch_target, other_target, resolve_launch
    from genie.cli.progress import count_progress
    from genie.engine.replay import ReplayRequest, check_fits, run_replay
    from genie.report.capture import capture_link
    from genie.report.manifest import RunRecorder, input_digest
    from genie.report.replay import end_summary, format_summary, replay_files
    from genie.workloads.analysis import check
    from genie.workloads.loader import load_trace

    if sample_ms < 0:
        raise InputError("must be >= 0", path="--sample-ms")
    loaded = load_trace(trace, npus=npus)
    check(loaded, source=str(trace))
    request = ReplayRequest(iterations=iterations, warmup=warmup, timeout_s=timeout)
    ranks = loaded.num_ranks
    digest = input_digest(trace, "trace")
    choice = resolve_launch(launcher, "tcp", inventory, mpiexec, port_range=port_range, replay=True,
                            other_target=other_target(topology, testbed, loopback))
    with launch_target(choice, inventory,
                       lambda: _target(topology, testbed, loopback, None if not loopback else ranks)) as target:
        check_fits(loaded, target.placements, source=str(trace))
        capture_end = _capture_end(target, capture)
        params = {"iterations": iterations, "warmup": warmup, "npus": npus, "ranks": ranks, "launcher": launcher,
                  **({"capture": capture} if capture else {})}
        with RunRecorder("replay", out=out, inputs=(digest, *target.inputs), params=params) as run:
            run.describe(target=target.name, shaper=target.shaper, topology=target.topology)
            with capture_link(run, capture_end) as capturing, _observe(run, target, sample_ms) as observer, \
                    count_progress("replay", "iteration") as progress:
                outcome = run_replay(loaded, target.placements, request, source=str(trace), on_pids=target.on_pids,
                                     progress=progress, sessions=choice.sessions)
            if choice.sessions is not None:
                run.write("launch.json", json.dumps(launch_meta(launcher, "tcp", choice), indent=2))
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
