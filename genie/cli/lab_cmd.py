"""`genie lab render`: a topology as a Vagrant lab (parse, call genie.lab, print)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from genie.cli.flags import flag_names
from genie.lab.plan import DEFAULT_BOX, DEFAULT_CPUS, DEFAULT_MEMORY_MB, DEFAULT_ROUTER_MEMORY_MB

#: lab_plan / render_lab fields -> flags
LAB_FLAGS = {"box": "--box", "memory_mb": "--memory", "cpus": "--cpus", "router_memory_mb": "--router-memory",
             "repo": "--repo"}

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
    memory: int = typer.Option(DEFAULT_MEMORY_MB, "--memory", help="Memory of each host VM, MiB."),
    cpus: int = typer.Option(DEFAULT_CPUS, "--cpus", help="CPUs of each host VM."),
    router_memory: int = typer.Option(DEFAULT_ROUTER_MEMORY_MB, "--router-memory",
                                      help="Memory of each router VM (router switches of the topology), MiB."),
    repo: Optional[Path] = typer.Option(None, "--repo", help="genie checkout to install in the VMs "
                                                              "(default: the one this genie runs from)."),
) -> None:
    """Write a Vagrantfile (libvirt and VirtualBox) with its provisioning, inventory.yaml and MPI hostfiles."""
    from genie.lab import plan_lab, write_lab
    from genie.topology import load_topology_file

    source = str(topology)
    with flag_names(LAB_FLAGS):
        lab = plan_lab(load_topology_file(topology), box=box, memory_mb=memory, cpus=cpus,
                       router_memory_mb=router_memory, source=source)
        write_lab(lab, outdir, repo=repo, source=source)
    counts = [_count(len(lab.hosts), "host VM"), _count(len(lab.routers), "router VM"),
              _count(len(lab.networks), "private network")]
    typer.echo(f"lab {lab.name}: {', '.join(c for c in counts if not c.startswith('0 '))}, box {lab.box} "
               f"-> {outdir}/")
    for machine in lab.hosts:
        typer.echo(f"  {machine.name:<15} {machine.address:<15} ranks {machine.ranks}")
    typer.echo(f"next: cd {outdir} && vagrant up   (walkthrough: vagrant/README.md)")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
