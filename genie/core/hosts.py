"""Rank numbering shared by topologies and host inventories: ranks are numbered host by host, in the order the
file lists the hosts."""

from __future__ import annotations

from typing import Any


class RankedHosts:
    """For a frozen dataclass with a `hosts` tuple whose items have `name` and `ranks`."""

    @property
    def world_size(self) -> int:
        return sum(h.ranks for h in self.hosts)  # type: ignore[attr-defined]

    def host(self, name: str) -> Any:
        for h in self.hosts:  # type: ignore[attr-defined]
            if h.name == name:
                return h
        raise KeyError(name)

    def rank_hosts(self) -> tuple[str, ...]:
        """Host name of each global rank: ranks are numbered host by host in file order."""
        return tuple(h.name for h in self.hosts for _ in range(h.ranks))  # type: ignore[attr-defined]
