"""`genie calibrate OUTPUT... --topology T`: the NCCL model fitted to a real cluster's nccl-tests
(docs/nccl-model.md)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from genie.cli.flags import flag_names

#: CalibrateRequest fields -> flags
CALIBRATE_FLAGS = {"outputs": "OUTPUT", "topology": "--topology", "predict": "--predict",
                   "gpus_per_node": "--gpus-per-node", "gpu": "--gpu", "interconnect": "--interconnect",
                   "collective": "--collective", "out": "--out", "nccl_env": "--nccl-env",
                   "nic_path": "--nic-path", "cpu": "--cpu"}


def calibrate(
    outputs: List[Path] = typer.Argument(..., help="nccl-tests outputs to fit: the stdout of any 2.x release "
                                                   "(one run or several per file) or its -J JSON."),
    topology: Path = typer.Option(..., "--topology", help="The cluster: a topology file with multi-GPU `nodes` "
                                                          "(NVLink, NICs, rails, speeds; docs/topology.md)."),
    predict: List[Path] = typer.Option([], "--predict", help="nccl-tests outputs to predict with the fitted "
                                                             "model (predictions.csv, geomean error); repeat."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node",
                                                help="Ranks per node, for outputs without `# Using devices` lines."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="The GPU model (H100, A100...), where the outputs do "
                                                          "not name it."),
    interconnect: str = typer.Option("nvswitch", "--interconnect",
                                     help="How a node's GPUs meet: nvswitch | nvlink | pcie."),
    collective: Optional[str] = typer.Option(None, "--collective",
                                             help="The collective of every table whose output does not print "
                                                  "it (`# Collective test starting`); one table of several: a "
                                                  "`### <binary>_perf` line above it instead."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<time>-calibrate)."),
    nccl_env: List[str] = typer.Option([], "--nccl-env", help="An NCCL setting the cluster ran with, e.g. "
                                                              "NCCL_ALGO=Ring,Tree, NCCL_PROTO=^LL128, "
                                                              "NCCL_NVLS_ENABLE=0 (over what outputs print); repeat."),
    nic_path: str = typer.Option("pxb", "--nic-path", help="A GPU's PCIe path to its nearest NIC as nvidia-smi "
                                                           "topo -m prints it: pix | pxb | phb | node | sys (NCCL "
                                                           "runs LL128 between nodes only up to pxb)."),
    cpu: str = typer.Option("intel", "--cpu", help="The nodes' CPU vendor: intel | amd | arm."),
) -> None:
    """Fit genie's NCCL model to a cluster's nccl-tests; print measured vs model and NCCL's choice per size."""
    from astra_adapter.nccl.calibration_io import format_residuals
    from astra_adapter.nccl.env import parse_assignment
    from astra_adapter.nccl.hardware import CpuVendor, Interconnect, NicPath
    from astra_adapter.nccl.versions import describe_release
    from genie.core.collective import Collective
    from genie.core.errors import InputError
    from genie.services.calibrate import CalibrateRequest, run_calibrate

    with flag_names(CALIBRATE_FLAGS):
        kind = Interconnect.parse(interconnect, path="interconnect")
        path = NicPath.parse(nic_path, path="nic_path")
        vendor = CpuVendor.parse(cpu, path="cpu")
        try:
            coll = Collective.parse(collective) if collective else None
        except ValueError as exc:
            raise InputError(str(exc), path="collective") from None
        if gpus_per_node is not None and gpus_per_node < 1:
            raise InputError(f"expected at least 1, got {gpus_per_node}", path="gpus_per_node")
        settings = tuple(parse_assignment(text, source="--nccl-env") for text in nccl_env)
        result = run_calibrate(CalibrateRequest(tuple(outputs), topology, tuple(predict), gpus_per_node, gpu, kind,
                                                coll, out, settings, path, vendor))
    fit = result.fit
    typer.echo(format_residuals(fit.residuals, f"calibration on {len(fit.residuals)} points of {fit.cluster.name} "
                                               f"({fit.cluster.gpu}): rms error {fit.rms_error_pct:.2f} %"))
    moved = ", ".join(f"{n}={getattr(fit.params, n):.4g} (nominal {getattr(fit.nominal, n):.4g})" for n in fit.fitted)
    typer.echo(f"# fitted: {moved or 'nothing moved from nominal'}")
    typer.echo(f"# NCCL tuner: {describe_release(fit.cluster.nccl_version, fit.cluster.compute_capability)}")
    if fit.cluster.nccl_env:
        typer.echo("# NCCL environment: " + " ".join(f"{k}={v}" for k, v in fit.cluster.nccl_env))
    if result.predictions:
        typer.echo(format_residuals(result.predictions, "predictions of measurements the calibration did not see"))
        typer.echo(f"# prediction geomean |error|: {result.prediction_geomean_pct:.2f} % over "
                   f"{len(result.predictions)} points")
    for finding in result.findings:
        typer.echo(f"# expected? {finding.describe()}")
    for text in result.warnings:
        typer.echo(f"# warning: {text}")
    typer.echo(f"# wrote {result.run_dir}")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
