"""`genie lab render|shape|verify`: a topology as a Vagrant lab (parse, call genie.services.lab, print)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from genie.cli import options

from genie.cli.flags import flag_message, flag_names
from genie.lab.plan import DEFAULT_BOX
from genie.testbed.steps import ShaperChoice

#: LabRenderRequest / plan_lab / render_lab fields -> flags
LAB_FLAGS = {"box": "--box", "memory_mb": "--memory", "cpus": "--cpus", "router_memory_mb": "--router-memory",
             "router_cpus": "--router-cpus", "repo": "--repo", "machine": "--machine", "shaper": "--shaper",
             "pairs": "--pair", "csv_path": "--csv", "out": "--out", "offline": "--offline"}

app = typer.Typer(help="Vagrant labs: one VM per topology host on private networks that follow its links.",
                  no_args_is_help=True)


@app.callback()
def _lab() -> None:
    """Vagrant labs: one VM per topology host on private networks that follow its links."""


@app.command("render")
def render_command(
    topology: Path = typer.Argument(..., help="Topology YAML file (see docs/topology.md)."),
    outdir: Path = typer.Argument(..., help="Directory for the Vagrantfile, inventory.yaml and hostfiles."),
    box: str = typer.Option(DEFAULT_BOX, "--box", help="Vagrant box of every VM (Debian 12 expected)."),
    memory: Optional[int] = typer.Option(None, "--memory", help="Memory of each host VM, MiB (default: from this "
                                                                "machine's memory, 1-2 GiB)."),
    cpus: Optional[int] = typer.Option(None, "--cpus", help="CPUs of each host VM (default: from this machine's "
                                                            "CPUs, 1-2)."),
    router_memory: Optional[int] = typer.Option(None, "--router-memory",
                                                help="Memory of each switch VM (routers and bridges), MiB [512]."),
    router_cpus: Optional[int] = typer.Option(None, "--router-cpus",
                                              help="CPUs of each switch VM (routers and bridges) [1]."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="genie checkout to install in the VMs "
                                                              "(default: the one this genie runs from)."),
    offline: bool = typer.Option(False, "--offline", help="Download genie's Python packages once into "
                                                          "OUTDIR/wheelhouse (pip download); every VM installs "
                                                          "from it."),
) -> None:
    """Write a Vagrantfile (libvirt and VirtualBox) with its provisioning, inventory.yaml and MPI hostfiles."""
    from genie.services.lab import LabRenderRequest, run_lab_render

    with flag_names(LAB_FLAGS):
        result = run_lab_render(LabRenderRequest(topology, outdir, box, memory, cpus, router_memory, router_cpus,
                                                 repo, offline))
    lab = result.lab
    counts = [_count(len(lab.hosts), "host VM"), _count(len(lab.routers), "router VM"),
              _count(len(lab.bridges), "bridge VM"), _count(len(lab.networks), "private network")]
    typer.echo(f"lab {lab.name}: {', '.join(c for c in counts if not c.startswith('0 '))}, box {lab.box} "
               f"-> {outdir}/")
    for machine in lab.hosts:
        typer.echo(f"  {machine.name:<15} {machine.address:<15} ranks {machine.ranks}")
    memory_mb = sum(m.memory_mb for m in lab.machines)
    typer.echo(f"  size: {memory_mb} MiB, {sum(m.cpus for m in lab.machines)} vCPUs in all "
               f"(host VMs {lab.hosts[0].memory_mb} MiB / {lab.hosts[0].cpus} CPUs)")
    if result.wheelhouse is not None:
        typer.echo(f"  wheelhouse: {result.wheelhouse}/ ({len(list(result.wheelhouse.glob('*')))} files)")
    for warning in result.warnings:
        typer.echo(f"warning: {flag_message(warning, LAB_FLAGS)}", err=True)
    typer.echo(f"next: cd {outdir} && vagrant up   (walkthrough: vagrant/README.md)")


@app.command("shape")
def shape_command(
    lab_dir: Path = typer.Argument(..., help="The lab directory (/vagrant inside a VM)."),
    machine: str = typer.Option(..., "--machine", help="The lab VM this is (a topology host, router or bridge)."),
    shaper: ShaperChoice = typer.Option(ShaperChoice.AUTO, "--shaper", case_sensitive=False,
                                        help="auto: netem where this kernel has sch_netem, else the userspace "
                                             "link emulator."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the steps, change nothing."),
    remove: bool = typer.Option(False, "--remove", help="Only remove the shaping an earlier run made."),
) -> None:
    """Inside a lab VM: shape its lab NICs exactly as the emulated testbed shapes the node (provisioner "shape")."""
    from genie.services.lab import LabShapeRequest, run_lab_shape

    with flag_names(LAB_FLAGS):
        result = run_lab_shape(LabShapeRequest(lab_dir, machine, shaper, dry_run, remove))
    if remove:
        typer.echo(f"{machine}: removed the lab's shaping ({result.undone_steps} objects)")
        return
    for line in result.shaping.describe():
        typer.echo(line)
    if result.applied:
        typer.echo(f"{machine}: applied {len(result.shaping.steps)} shaping steps"
                   + (f" (undid {result.undone_steps} of an earlier run first)" if result.undone_steps else ""))


@app.command("verify")
def verify_command(
    lab_dir: Path = typer.Argument(..., help="The lab directory (/vagrant inside a host VM)."),
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Also write the table as CSV here."),
    seconds: float = options.VERIFY_SECONDS,
    loss_probes: int = options.VERIFY_LOSS_PROBES,
    rtt_probes: int = options.VERIFY_RTT_PROBES,
    pair: Optional[list[str]] = options.VERIFY_PAIR,
    out: Optional[Path] = options.VERIFY_OUT,
) -> None:
    """From a host VM: `genie testbed verify`'s link checks (RTT, throughput, loss) across the lab's hosts, over
    ssh to the inventory's addresses, against the topology."""
    from genie.services.lab import LabVerifyRequest, run_lab_verify
    from genie.cli.testbed_cmd import print_verify
    from genie.services.verify import check_pairs
    from genie.testbed.verify_run import VerifySettings

    settings = VerifySettings(bulk_seconds=seconds, rtt_probes=rtt_probes, loss_probes=loss_probes)
    with flag_names(LAB_FLAGS):
        request = LabVerifyRequest(lab_dir, settings, check_pairs(pair) if pair else None, csv_path, out)
        result = run_lab_verify(request, progress=lambda line: typer.echo(line, err=True))
    print_verify(result)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
