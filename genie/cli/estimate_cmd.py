"""`genie estimate TRACE --measurements RUN_DIR` and `genie experiment EXPERIMENT.yaml` (see docs/astra.md)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from genie.cli import options
from genie.cli.flags import RUN_FLAGS, flag_names

#: EstimateRequest fields -> flags
ESTIMATE_FLAGS = {"measurements": "--measurements", "mode": "--mode", "topology": "--topology", "npus": "--npus",
                  "out": "--out", "calibration": "--calibration", "jobs": "--jobs", "placements": "--placements",
                  "trace": "TRACE", "end_precision": "--end-precision", "ring_model": "--ring-model",
                  "draw_precision": "--draw-precision"}


def estimate(
    trace: Optional[Path] = typer.Argument(None, help="Trace: Chakra ET prefix or directory, genie JSON/YAML, "
                                                      "PARAM dir, ASTRA-sim text (with --npus); or --jobs."),
    measurements: List[Path] = typer.Option([], "--measurements", "-m",
                                            help="Run directory with sweep.csv (genie bench / genie experiment); "
                                                 "repeat for several."),
    mode: Optional[str] = typer.Option(None, "--mode", help="measured (interpolated measurements) | calibrated "
                                                            "(fitted ASTRA-sim network in the built-in estimator) | "
                                                            "fabric (the fabric model on the topology file; the "
                                                            "default where the topology is not an ASTRA-sim "
                                                            "dimension stack, where the workload's groups share "
                                                            "its links, or with a fabric --calibration) | nccl "
                                                            "(NCCL's tuner with a genie calibrate run: the default "
                                                            "with one; fabric with one: NCCL's choices as flows on "
                                                            "the topology, the default where the workload's ops "
                                                            "contend for links); default measured."),
    topology: Optional[Path] = typer.Option(None, "--topology",
                                            help="Topology to estimate on (and to fit the measurements on when the "
                                                 "run directory has no calibration.json)."),
    extrapolate: bool = typer.Option(False, "--extrapolate",
                                     help="Measured mode: time ops outside the measurements with the calibrated "
                                          "model instead of failing."),
    share_nic: bool = typer.Option(True, "--share-nic/--no-share-nic",
                                   help="Measured mode: concurrent ops share a rank's link."),
    npus: Optional[int] = typer.Option(None, "--npus", help="Ranks for an ASTRA-sim text workload."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory for estimate.csv (default: "
                                                           "runs/<time>-estimate)."),
    calibration: Optional[Path] = typer.Option(None, "--calibration",
                                               help="A run directory with nccl_calibration.json (genie calibrate: "
                                                    "NCCL mode, on --topology's nodes) or fabric_calibration.json "
                                                    "(fabric mode, fitted on another topology with the same link "
                                                    "classes)."),
    explain: bool = typer.Option(False, "--explain", help="With an NCCL calibration (nccl or fabric mode): print "
                                                          "per op kind the algorithm, protocol and channels "
                                                          "assumed, and the NCCL model's time of it alone."),
    end_precision: Optional[float] = typer.Option(
        None, "--end-precision", help="Fabric mode: flow ends within this share of their step's time so far are "
        "one event (faster on big traces; the error stays within it: benchmarks/README.md); 0: exact; default "
        "1e-3 (astra_adapter.fabric.flows.END_PRECISION)."),
    ring_model: Optional[str] = typer.Option(
        None, "--ring-model", help="Fabric mode: lockstep (each connection of a ring step its own max-min flow, the "
        "step ending with its slowest) | coflow (a ring step one flow at the ring's bottleneck rate: NCCL's pipelined "
        "ring; one event a step); default coflow (astra_adapter.fabric.coflow.RING_MODEL)."),
    draw_precision: Optional[float] = typer.Option(
        None, "--draw-precision", help="Fabric mode with ECMP: hash draws stop (at 4 or more, of 8) once the standard "
        "error of their mean iteration is within this share of it; 0: all 8; default 1e-3 "
        "(astra_adapter.fabric.estimate.DRAW_PRECISION)."),
    jobs: Optional[Path] = typer.Option(None, "--jobs", help="A job mix (docs/jobs.md) instead of TRACE: each "
                                                             "job's iteration in the mix and alone on the fabric "
                                                             "model, its slowdown (needs --topology)."),
    placements: Optional[str] = typer.Option(None, "--placements",
                                             help="With --jobs: rank these placements of every job by the mix's "
                                                  "slowdown, e.g. packed,spread,random:8 (random:SEED)."),
    replay_run: Optional[Path] = typer.Option(None, "--replay-run",
                                              help="With --jobs: a `genie replay --jobs` run directory of the same "
                                                   "mix: ECMP on the paths its sessions took, its repetitions."),
    standing_queues: bool = typer.Option(True, "--standing-queues/--no-standing-queues",
                                         help="With --jobs: a step waits for the other jobs' queued TCP windows on "
                                              "the full links it crosses, and a ring's ranks each go on their own "
                                              "step (off: rates alone in lock step, much faster at hundreds of "
                                              "hosts)."),
    htb_credit: Optional[bool] = typer.Option(None, "--htb-credit/--no-htb-credit",
                                              help="With --jobs: links shaped below 10 Gbit/s carry the testbed's "
                                                   "HTB buckets (after idle time a burst at once, then 2 % above "
                                                   "the rate until the rate bucket is spent); default: on where the "
                                                   "topology's testbed has bucket links (no link delay)."),
) -> None:
    """Estimate TRACE's iteration time per rank from measured collective latencies; writes estimate.csv."""
    if jobs is not None or placements is not None or replay_run is not None:
        from genie.cli.mix_cmd import estimate_mix
        return estimate_mix(trace, jobs, placements, topology=topology, calibration=calibration, out=out,
                            measurements=tuple(measurements), mode=mode, replay_run=replay_run,
                            standing_queues=standing_queues, htb_credit=htb_credit)
    if trace is None:
        from genie.core.errors import InputError
        raise InputError("give a TRACE (or --jobs FILE)")
    from astra_adapter.fabric.coflow import RingModel
    from astra_adapter.workload_estimate import EstimateMode, format_estimate
    from genie.services.estimate import EstimateRequest, run_estimate

    with flag_names(ESTIMATE_FLAGS):
        result = run_estimate(EstimateRequest(trace, tuple(measurements),
                                              EstimateMode.parse(mode) if mode is not None else None, topology,
                                              extrapolate, share_nic, npus, out, calibration, end_precision,
                                              RingModel.parse(ring_model, path="ring_model")
                                              if ring_model is not None else None, draw_precision))
    if explain and not result.nccl_choices:
        typer.echo("# --explain: only an NCCL calibration (--calibration with nccl_calibration.json) assumes "
                   "NCCL's choices", err=True)
    typer.echo(format_estimate(result.estimate))
    if explain and result.nccl_choices:
        from astra_adapter.nccl.estimate import format_choices
        typer.echo(format_choices(result.nccl_choices))
    typer.echo(f"# wrote {result.estimate_path}")
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)


@options.run_options(target=False)
def experiment(
    spec: Path = typer.Argument(..., help="Experiment YAML (workload, topology, sweep, replay; docs/astra.md)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-experiment-<name>)."),
    calibration: Optional[Path] = typer.Option(
        None, "--calibration", help="A real cluster's `genie calibrate` run directory: the trace is also estimated by "
        "the NCCL model on the experiment's topology and compared with the replay (overrides the spec's "
        "estimate.nccl_calibration)."),
    *, run,
) -> None:
    """Bring up the testbed, measure the trace's collectives, calibrate, estimate, replay, compare, tear down."""
    from astra_adapter.experiment import format_summary
    from astra_adapter.experiment_spec import load_experiment
    from genie.services.experiment import ExperimentCommand, run_experiment_command

    loaded = load_experiment(spec)
    if calibration is not None:
        import dataclasses

        loaded = dataclasses.replace(loaded, nccl_calibration=calibration)

    def progress(message: str) -> None:
        typer.echo(f"# {message}", err=True)

    with flag_names(RUN_FLAGS):
        result = run_experiment_command(ExperimentCommand(loaded, run), progress)
    if loaded.workload.jobs_path is not None:
        from astra_adapter.experiment_mix import format_mix_summary
        typer.echo(format_mix_summary(result))
    else:
        typer.echo(format_summary(result))


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate)
    app.command("experiment")(experiment)
