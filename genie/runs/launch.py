"""`--launcher`, `--transport`, `--inventory`, `--mpiexec`, `--port-range` of `genie bench` and `genie replay`:
turned into the placements (real hosts, or a Slurm allocation's nodes) and the session factory the
bench/replay services take. Parsing and checks only: every problem is an InputError naming the option (exit
code 2 in the CLI)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from enum import Enum
from typing import Any, Callable, ContextManager, Mapping, NamedTuple

from genie.core.errors import InputError
from genie.core.placement import RankPlacement
from genie.engine.session import SessionFactory

class LauncherKind(Enum):
    """Values of --launcher: who starts the ranks."""

    LOCAL = "local"  # genie itself (ip netns exec, a unix-socket control channel)
    MPI = "mpi"      # MPICH's mpiexec (hydra)
    SLURM = "slurm"  # Slurm's srun, inside an allocation


TRANSPORTS = ("tcp", "mpi")


class LaunchChoice(NamedTuple):
    """`placements`: the real hosts' ranks (an inventory, or a Slurm allocation), None when the run's
    placements come from --topology/--testbed/--loopback. `sessions`: None for genie's own local launch (the
    default). `target`: what the run directory calls a real-host target that has no inventory file."""

    placements: list[RankPlacement] | None
    sessions: SessionFactory | None
    target: str | None = None


def _parse_launcher(launcher: str) -> LauncherKind:
    text = (launcher or "local").strip().lower()
    try:
        return LauncherKind(text)
    except ValueError:
        raise InputError(f"expected one of {', '.join(k.value for k in LauncherKind)}, got {text!r}",
                         path="--launcher") from None


def resolve_launch(launcher: str, transport: str, inventory: Path | None, mpiexec: Path | None, *,
                   ranks: int | None = None, port_range: str | None = None, replay: bool = False,
                   other_target: str | None = None,
                   environ: Mapping[str, str] = os.environ) -> LaunchChoice:
    """Check the launch options together and build what they ask for.

    `other_target` names a --topology/--testbed/--loopback option also given (it excludes --inventory);
    `port_range` falls back to $GENIE_PORT_RANGE. With --launcher slurm and no target at all, the hosts are
    the allocation's nodes. `replay` is kept for callers; both transports replay."""
    from genie.engine.mpi.plan import PORT_RANGE_ENV, parse_port_range

    kind = _parse_launcher(launcher)
    transport = (transport or "tcp").strip().lower()
    if transport not in TRANSPORTS:
        raise InputError(f"expected one of {', '.join(TRANSPORTS)}, got {transport!r}", path="--transport")
    if kind is LauncherKind.LOCAL:
        for given, option, what in ((transport == "mpi", "--transport", "MPI point-to-point needs"),
                                    (inventory is not None, "--inventory", "real hosts need"),
                                    (mpiexec is not None, "--mpiexec", "an mpiexec needs"),
                                    (port_range is not None, "--port-range", "a port range needs")):
            if given:
                raise InputError(f"{what} --launcher mpi or slurm", path=option)
        return LaunchChoice(None, None)
    if inventory is not None and other_target:
        raise InputError(f"give either --inventory or {other_target}, not both", path="--inventory")
    if kind is LauncherKind.SLURM and mpiexec is not None:
        raise InputError("Slurm's srun starts the ranks with --launcher slurm; --mpiexec is for --launcher mpi",
                         path="--mpiexec")
    ports_text = port_range if port_range is not None else environ.get(PORT_RANGE_ENV) or None
    ports = parse_port_range(ports_text, path="--port-range" if port_range is not None else PORT_RANGE_ENV) \
        if ports_text else None

    from genie.engine.bench import placements_for
    from genie.engine.mpi import MpiLaunch, MpiSessions, find_mpiexec, mpi4py_available
    from genie.engine.mpi.discover import INSTALL_HINT
    from genie.inventory import inventory_to_testbed_info, load_inventory_file

    slurm = None
    if kind is LauncherKind.SLURM:
        from genie.engine.mpi.slurm import SlurmAllocation

        SlurmAllocation.from_env(environ)  # outside an allocation: say so first
    if not mpi4py_available():
        raise InputError(f"mpi4py is not installed for this Python; {INSTALL_HINT}", path="--launcher")
    inv = load_inventory_file(inventory) if inventory is not None else None
    target = None
    if kind is LauncherKind.SLURM:
        from genie.engine.mpi.slurm import allocation_inventory, resolve_slurm

        if inv is None and other_target is None:
            inv = allocation_inventory(SlurmAllocation.from_env(environ))
        exe, slurm = resolve_slurm(environ, inv, inventory_source=str(inventory or "<allocation>"))
        if inventory is None and inv is not None:
            target = slurm.allocation.describe()
    else:
        exe = find_mpiexec(mpiexec)
    placements = placements_for(inventory_to_testbed_info(inv), ranks) if inv is not None else None
    return LaunchChoice(placements, MpiSessions(MpiLaunch(mpiexec=exe, transport=transport, inventory=inv,
                                                          port_range=ports, slurm=slurm)), target)


def other_target(topology: Path | None, testbed: str | None, loopback: bool) -> str | None:
    """The --topology/--testbed/--loopback option given, if any (for `resolve_launch`'s `other_target`)."""
    for option, value in (("--topology", topology), ("--testbed", testbed), ("--loopback", loopback or None)):
        if value is not None:
            return option
    return None


def launch_target(choice: LaunchChoice, inventory: Path | None,
                  testbed_target: Callable[[], ContextManager[Any]]) -> ContextManager[Any]:
    """What `genie bench`/`genie replay` enter for their `Target`: the inventory's hosts for a real-host run
    (no testbed, no PIDs to register: the ranks run on other machines; the inventory's digest as input),
    else `testbed_target()` (their --topology/--testbed/--loopback context, `genie.runs.target.open_target`)."""
    if choice.placements is None:
        return testbed_target()
    from genie.runs.target import Target
    from genie.report.manifest import input_digest

    if inventory is None:  # a Slurm allocation's nodes: no file to digest
        return contextlib.nullcontext(Target(choice.placements, None, choice.target or "allocation", None, (),
                                             "none", None))
    name = f"inventory {inventory}"
    return contextlib.nullcontext(Target(choice.placements, None, name, None,
                                         (input_digest(inventory, "inventory"),), "none", None))


def check_launch(choice: LaunchChoice, placements: list[RankPlacement]) -> None:
    """Whatever the launcher can check about `placements` before anything starts (Slurm: every rank has a
    node of the allocation with a task for it)."""
    check = getattr(choice.sessions, "check", None)
    if check is not None:
        check(placements)


def launch_meta(launcher: str, transport: str, choice: LaunchChoice) -> dict[str, Any]:
    """For the run directory's metadata: how the ranks were started and, for MPI, the clock offsets."""
    meta: dict[str, Any] = {"launcher": launcher, "transport": transport}
    offsets = getattr(choice.sessions, "clock_offsets", None)
    if offsets is not None:
        meta["clock_offsets"] = offsets
    return meta
