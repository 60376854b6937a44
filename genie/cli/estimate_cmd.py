"""`genie estimate TRACE --measurements RUN_DIR` and `genie experiment EXPERIMENT.yaml` (see docs/astra.md)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def estimate(
    trace: Path = typer.Argument(..., help="Trace: Chakra ET prefix or directory, genie JSON/YAML, PARAM dir, "
                                           "ASTRA-sim text (with --npus)."),
    measurements: List[Path] = typer.Option(..., "--measurements", "-m",
                                            help="Run directory with sweep.csv (genie bench / genie experiment); "
                                                 "repeat for several."),
    mode: str = typer.Option("measured", "--mode", help="measured (interpolated measurements) | calibrated "
                                                        "(fitted ASTRA-sim network in the built-in estimator)."),
    topology: Optional[Path] = typer.Option(None, "--topology",
                                            help="Topology to estimate on (and to fit the measurements on when the "
                                                 "run directory has no calibration.json)."),
    extrapolate: bool = typer.Option(False, "--extrapolate",
                                     help="Measured mode: time ops outside the measurements with the calibrated "
                                          "model instead of failing."),
    share_nic: bool = typer.Option(True, "--share-nic/--no-share-nic",
                                   help="Measured mode: concurrent ops share a rank's link."),
    npus: Optional[int] = typer.Option(None, "--npus", help="Ranks for an ASTRA-sim text workload."),
    out: Optional[Path] = typer.Option(None, "--out", help="Directory for estimate.csv (default: runs/<time>-estimate)."),
) -> None:
    """Estimate TRACE's iteration time per rank from measured collective latencies; writes estimate.csv."""
    from astra_adapter.calibration_io import write_calibration
    from astra_adapter.mapping import map_topology
    from astra_adapter.workload_estimate import EstimateMode, estimate_from_runs, format_estimate, write_estimate
    from genie.report.rundir import new_run_dir
    from genie.topology import load_topology_file
    from genie.workloads.analysis import check
    from genie.workloads.loader import load_trace

    chosen = EstimateMode.parse(mode)
    mapping = None
    if topology is not None:
        mapping = map_topology(load_topology_file(topology), source=str(topology))
    loaded = load_trace(trace, npus=npus)
    check(loaded, source=str(trace))
    est, calibration = estimate_from_runs(loaded, measurements, chosen, mapping=mapping, extrapolate=extrapolate,
                                          share_nic=share_nic)
    run_dir = new_run_dir("estimate", out=out)
    path = write_estimate(est, run_dir)
    if calibration is not None and calibration.points:
        write_calibration(calibration, run_dir)
    typer.echo(format_estimate(est))
    typer.echo(f"# wrote {path}")


def experiment(
    spec: Path = typer.Argument(..., help="Experiment YAML (workload, topology, sweep, replay; docs/astra.md)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-experiment-<name>)."),
) -> None:
    """Bring up the testbed, measure the trace's collectives, calibrate, estimate, replay, compare, tear down."""
    from astra_adapter.experiment import format_summary, run_experiment
    from astra_adapter.experiment_spec import load_experiment
    from genie.report.rundir import new_run_dir

    loaded = load_experiment(spec)

    def progress(message: str) -> None:
        typer.echo(f"# {message}", err=True)

    result = run_experiment(loaded, lambda: new_run_dir(f"experiment-{loaded.name}", out=out), progress)
    typer.echo(format_summary(result))


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate)
    app.command("experiment")(experiment)
