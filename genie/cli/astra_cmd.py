"""`genie astra`: ASTRA-sim's analytical backends without ASTRA-sim, and its output as estimate.csv.

``genie astra simulate`` takes ASTRA-sim's own options and prints ASTRA-sim's lines, so scripts written for
``AstraSim_Analytical_Congestion_Unaware`` / ``..._Aware`` can call genie instead (``--backend``); the
executables with those very names are :mod:`genie.cli.astra_dropin`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(help="ASTRA-sim: built-in analytical estimator, real-binary runner, output parsing.",
                  no_args_is_help=True)


def _summary(result, path: Path) -> str:
    return (f"wrote {path} ({len(result.ranks)} ranks, max finish {result.max_finish_cycles} cycles, "
            f"max exposed communication {result.max_exposed_comm_cycles} cycles)")


SIMULATE_FLAGS = {"injection_scale": "--injection-scale", "queues_per_dim": "--num-queues-per-dim",
                  "comm_scale": "--comm-scale", "compute_scale": "--compute-scale",
                  "rendezvous_protocol": "--rendezvous-protocol", "backend": "--backend"}


@app.command()
def simulate(
    workload_configuration: str = typer.Option(..., "--workload-configuration",
                                               help="Chakra ET prefix: <prefix>.<rank>.et per rank."),
    system_configuration: Path = typer.Option(..., "--system-configuration", help="ASTRA-sim system.json."),
    network_configuration: Path = typer.Option(..., "--network-configuration", help="Analytical network.yml."),
    remote_memory_configuration: Optional[Path] = typer.Option(None, "--remote-memory-configuration",
                                                               help="remote_memory.json (needed for memory nodes)."),
    comm_group_configuration: Optional[Path] = typer.Option(
        None, "--comm-group-configuration", help="Process groups: JSON object, pg_name -> list of ranks."),
    logging_folder: Optional[Path] = typer.Option(None, "--logging-folder", help="Accepted for compatibility."),
    logging_configuration: Optional[Path] = typer.Option(None, "--logging-configuration",
                                                         help="Accepted for compatibility."),
    backend: str = typer.Option("congestion_unaware", "--backend",
                                help="congestion_unaware (AstraSim_Analytical_Congestion_Unaware) or "
                                     "congestion_aware (AstraSim_Analytical_Congestion_Aware: links shared, 1-dim)."),
    num_queues_per_dim: int = typer.Option(1, "--num-queues-per-dim", help="Queues per network dimension (1)."),
    injection_scale: float = typer.Option(1.0, "--injection-scale", help="Multiplies endpoint-delay."),
    comm_scale: float = typer.Option(1.0, "--comm-scale", help="Only 1 is supported."),
    compute_scale: float = typer.Option(1.0, "--compute-scale", help="Only 1 is supported."),
    rendezvous_protocol: bool = typer.Option(False, "--rendezvous-protocol", help="Not supported."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write DIR/estimate.csv."),
    symmetry: Optional[bool] = typer.Option(None, "--symmetry/--no-symmetry",
                                            help="Simulate one rank per class of identical ranks (aware: only "
                                                 "where one rank provably stands for all; default: above 64 "
                                                 "ranks)."),
) -> None:
    """Estimate like ASTRA-sim's analytical binaries and print their lines.

    Example: genie astra simulate --backend congestion_aware --workload-configuration=workload/all_reduce
    --system-configuration=system.json --network-configuration=network.yml
    """
    from genie.cli.flags import flag_names
    from genie.services.astra import SimulateRequest, run_simulate

    request = SimulateRequest(workload_configuration, system_configuration, network_configuration,
                              remote_memory_configuration, comm_group_configuration, backend, num_queues_per_dim,
                              injection_scale, comm_scale, compute_scale, rendezvous_protocol, symmetry, out)
    with flag_names(SIMULATE_FLAGS):
        done = run_simulate(request)
    typer.echo(done.estimate.stdout(), nl=False)


@app.command()
def parse(
    stdout_file: Path = typer.Argument(..., help="ASTRA-sim's captured stdout."),
    out: Path = typer.Option(Path("."), "--out", help="Directory for estimate.csv."),
) -> None:
    """Turn a real ASTRA-sim log into estimate.csv."""
    from astra_adapter.output import parse_astra_output, write_estimate_csv
    from genie.core.files import InputKind, read_input

    result = parse_astra_output(read_input(stdout_file, InputKind.MEASUREMENTS), source=str(stdout_file))
    typer.echo(_summary(result, write_estimate_csv(result, out)))


@app.command()
def run(
    binary: Path = typer.Option(..., "--binary", help="ASTRA-sim analytical binary."),
    workload_configuration: str = typer.Option(..., "--workload-configuration"),
    system_configuration: Path = typer.Option(..., "--system-configuration"),
    network_configuration: Path = typer.Option(..., "--network-configuration"),
    remote_memory_configuration: Path = typer.Option(..., "--remote-memory-configuration"),
    comm_group_configuration: Optional[Path] = typer.Option(None, "--comm-group-configuration"),
    out: Path = typer.Option(Path("."), "--out", help="Directory for estimate.csv."),
) -> None:
    """Run a real ASTRA-sim binary, print its output and write estimate.csv."""
    from astra_adapter.output import write_estimate_csv
    from astra_adapter.runner import run_astra_binary

    done = run_astra_binary(binary, workload_configuration, system_configuration, network_configuration,
                            remote_memory_configuration, comm_group=comm_group_configuration)
    typer.echo(done.stdout, nl=False)
    for warning in done.warnings:
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(_summary(done.result, write_estimate_csv(done.result, out)), err=True)


@app.command()
def export(
    trace: Path = typer.Argument(..., help="Trace: Chakra ET prefix or directory, genie JSON/YAML, PARAM dir, "
                                           "ASTRA-sim text (with --npus)."),
    out: Path = typer.Argument(..., help="Output directory for the ASTRA-sim input set."),
    topology: Path = typer.Option(..., "--topology", help="genie topology the trace runs on (mapped to ASTRA-sim "
                                                          "dimensions)."),
    network: Optional[Path] = typer.Option(None, "--network",
                                           help="Calibration (calibration.json or its run directory) or a "
                                                "network.yml; default: the topology's link rates and delays."),
    npus: Optional[int] = typer.Option(None, "--npus", help="Ranks for an ASTRA-sim text workload."),
    name: str = typer.Option("workload", "--name", help="ET file prefix: OUT/workload/<name>.<rank>.et."),
    algorithm: list[str] = typer.Option([], "--algorithm",
                                        help="COLLECTIVE=ALGORITHM (e.g. all_reduce=ring); default: the trace's "
                                             "hints, else ring (direct for all_to_all)."),
    splits: int = typer.Option(1, "--splits", help="preferred-dataset-splits."),
    endpoint_delay: Optional[int] = typer.Option(None, "--endpoint-delay",
                                                 help="endpoint-delay in ns (default: calibrated, else 10)."),
) -> None:
    """Write the ASTRA-sim input set: per-rank ETs, system.json, network.yml, remote_memory.json, comm groups."""
    from genie.cli.flags import flag_names
    from genie.services.astra import ExportRequest, parse_algorithms, run_export

    with flag_names({"algorithms": "--algorithm", "splits": "--splits", "network": "--network",
                     "topology": "--topology", "npus": "--npus"}):
        done = run_export(ExportRequest(trace, out, topology, network, npus, name, parse_algorithms(algorithm),
                                        splits, endpoint_delay))
    export = done.export
    for note in done.notes:
        typer.echo(f"# note: {note}")
    dims = " x ".join(f"{d.topology.value}({d.npus_count})" for d in export.network.dims)
    typer.echo(f"wrote {len(export.files)} files to {out}: {done.ranks} ranks on {dims}"
               + (f", {len(export.renaming.names)} groups renumbered" if export.renaming.names else ""))
    for note in export.notes:
        typer.echo(f"# note: {note}")
    typer.echo(f"# run: {out / 'cmd.sh'}")
