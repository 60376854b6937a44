"""A run's launcher, data path, inventory, mpiexec and port range turned into the placements (real hosts, or a
Slurm allocation's nodes) and the session factory the rank-running services take. Checks only: every problem
is an InputError naming the `RunOptions` field (the CLI shows its flag)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping, NamedTuple

from genie.core.errors import InputError
from genie.core.launch import DataPath, LauncherKind
from genie.core.placement import RankPlacement
from genie.engine.session import SessionFactory


class LaunchChoice(NamedTuple):
    """`placements`: the real hosts' ranks (an inventory, or a Slurm allocation), None when the run's
    placements come from a topology, a testbed or loopback. `sessions`: None for genie's own local launch (the
    default). `target`: what the run directory calls a real-host target that has no inventory file."""

    placements: list[RankPlacement] | None
    sessions: SessionFactory | None
    target: str | None = None


def parse_kind(kind: type, text: str | None, field: str, default: Any) -> Any:
    """`text` as a member of the enum `kind` (case-insensitive); None or empty: `default`."""
    value = (text or default.value).strip().lower()
    try:
        return kind(value)
    except ValueError:
        raise InputError(f"expected one of {', '.join(k.value for k in kind)}, got {value!r}", path=field) from None


def resolve_launch(launcher: LauncherKind, transport: DataPath, inventory: Path | None, mpiexec: Path | None, *,
                   ranks: int | None = None, port_range: str | None = None, other_target: str | None = None,
                   environ: Mapping[str, str] = os.environ) -> LaunchChoice:
    """Check the launch options together and build what they ask for.

    `other_target` names a topology/testbed/loopback field also given (it excludes an inventory);
    `port_range` falls back to $GENIE_PORT_RANGE. With the Slurm launcher and no target at all, the hosts are
    the allocation's nodes."""
    from genie.engine.mpi.plan import PORT_RANGE_ENV, parse_port_range

    if launcher is LauncherKind.LOCAL:
        for given, field, what in ((transport is DataPath.MPI, "transport", "MPI point-to-point needs"),
                                   (inventory is not None, "inventory", "real hosts need"),
                                   (mpiexec is not None, "mpiexec", "an mpiexec needs"),
                                   (port_range is not None, "port_range", "a port range needs")):
            if given:
                raise InputError(f"{what} `launcher` mpi or slurm", path=field)
        return LaunchChoice(None, None)
    if inventory is not None and other_target:
        raise InputError(f"give either `inventory` or `{other_target}`, not both", path="inventory")
    if launcher is LauncherKind.SLURM and mpiexec is not None:
        raise InputError("Slurm's srun starts the ranks with `launcher` slurm; `mpiexec` is for `launcher` mpi",
                         path="mpiexec")
    ports_text = port_range if port_range is not None else environ.get(PORT_RANGE_ENV) or None
    ports = parse_port_range(ports_text, path="port_range" if port_range is not None else PORT_RANGE_ENV) \
        if ports_text else None

    from genie.engine.mpi import MpiLaunch, MpiSessions, find_mpiexec, mpi4py_available
    from genie.engine.mpi.discover import INSTALL_HINT
    from genie.inventory import inventory_to_testbed_info, load_inventory_file
    from genie.services.placement import placements_for

    slurm = None
    if launcher is LauncherKind.SLURM:
        from genie.engine.mpi.slurm import SlurmAllocation

        SlurmAllocation.from_env(environ)  # outside an allocation: say so first
    if not mpi4py_available():
        raise InputError(f"mpi4py is not installed for this Python; {INSTALL_HINT}", path="launcher")
    inv = load_inventory_file(inventory) if inventory is not None else None
    target = None
    if launcher is LauncherKind.SLURM:
        from genie.engine.mpi.slurm import allocation_inventory, resolve_slurm

        if inv is None and other_target is None:
            inv = allocation_inventory(SlurmAllocation.from_env(environ))
        exe, slurm = resolve_slurm(environ, inv, inventory_source=str(inventory or "<allocation>"))
        if inventory is None and inv is not None:
            target = slurm.allocation.describe()
    else:
        exe = find_mpiexec(mpiexec)
    placements = placements_for(inventory_to_testbed_info(inv), ranks) if inv is not None else None
    return LaunchChoice(placements, MpiSessions(MpiLaunch(mpiexec=exe, transport=transport.value, inventory=inv,
                                                          port_range=ports, slurm=slurm)), target)


def launch_target(choice: LaunchChoice, inventory: Path | None,
                  testbed_target: Callable[[], ContextManager[Any]]) -> ContextManager[Any]:
    """What a rank-running service enters for its `Target`: the inventory's hosts for a real-host run (no
    testbed, no PIDs to register: the ranks run on other machines; the inventory's digest as input), else
    `testbed_target()` (its topology/testbed/loopback context, `genie.services.target.open_target`)."""
    if choice.placements is None:
        return testbed_target()
    from genie.core.testbed import Shaping
    from genie.report.manifest import input_digest
    from genie.services.target import Target

    if inventory is None:  # a Slurm allocation's nodes: no file to digest
        return contextlib.nullcontext(Target(choice.placements, None, choice.target or "allocation", None, (),
                                             Shaping.NONE, None))
    name = f"inventory {inventory}"
    return contextlib.nullcontext(Target(choice.placements, None, name, None,
                                         (input_digest(inventory, "inventory"),), Shaping.NONE, None))


def check_launch(choice: LaunchChoice, placements: list[RankPlacement]) -> None:
    """Whatever the launcher can check about `placements` before anything starts (Slurm: every rank has a
    node of the allocation with a task for it)."""
    check = getattr(choice.sessions, "check", None)
    if check is not None:
        check(placements)


def launch_meta(launcher: LauncherKind, transport: DataPath, choice: LaunchChoice) -> dict[str, Any]:
    """For the run directory's metadata: how the ranks were started and, for MPI, the clock offsets."""
    meta: dict[str, Any] = {"launcher": launcher.value, "transport": transport.value}
    offsets = getattr(choice.sessions, "clock_offsets", None)
    if offsets is not None:
        meta["clock_offsets"] = offsets
    return meta
