"""Host inventory: the real machines a run places ranks on. Pure data; see genie.inventory for YAML.

A host is reached (ssh, mpirun) at ``address``; its ranks listen on its *traffic address*: the address of
``interface`` and/or inside ``subnet`` when either is given, else ``address`` itself. Ranks are numbered host
by host in inventory order, as in a topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.hosts import RankedHosts

DEFAULT_INVENTORY_NAME = "inventory"


class HostfileFormat(Enum):
    """MPI hostfile dialects: MPICH's hydra (``host:slots``) and Open MPI (``host slots=N``)."""

    MPICH = "mpich"
    OPENMPI = "openmpi"


@dataclass(frozen=True)
class InventoryHost:
    """One real machine. ``interface`` / ``subnet`` select the NIC that carries genie traffic (None: the one
    holding ``address``); ``ssh_user`` / ``ssh_port`` None mean ssh's own defaults."""

    name: str
    address: str
    ranks: int = 1
    interface: str | None = None
    subnet: str | None = None
    ssh_user: str | None = None
    ssh_port: int | None = None


@dataclass(frozen=True)
class Inventory(RankedHosts):
    name: str
    hosts: tuple[InventoryHost, ...]
