"""Host inventory: the real machines a run places ranks on. Pure data; see genie.inventory for YAML.

A host is reached (ssh, mpirun) at ``address``; its ranks listen on its *traffic address*: the address of
``interface`` and/or inside ``subnet`` when either is given, else ``address`` itself. Ranks are numbered host
by host in inventory order, as in a topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

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
class Inventory:
    name: str
    hosts: tuple[InventoryHost, ...]

    @property
    def world_size(self) -> int:
        return sum(h.ranks for h in self.hosts)

    def host(self, name: str) -> InventoryHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def rank_hosts(self) -> tuple[str, ...]:
        """Host name of each global rank: ranks are numbered host by host in inventory order."""
        return tuple(h.name for h in self.hosts for _ in range(h.ranks))
