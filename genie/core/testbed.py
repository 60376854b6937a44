"""What a live testbed looks like to its users (engine, measurement): pure data saved in the state directory."""

from __future__ import annotations

from dataclasses import dataclass

from genie.core.topology import Topology


@dataclass(frozen=True)
class HostEndpoint:
    """Where a host's rank processes run (``netns``; None means the current namespace) and the address
    peers reach them at."""

    host: str
    netns: str | None
    address: str


@dataclass(frozen=True)
class LinkEnd:
    """One end of topology link ``link_index`` (index into Topology.links): interface ``ifname`` of ``node``
    living in namespace ``netns``. Its TX counters are the link direction node -> peer."""

    link_index: int
    node: str
    peer: str
    netns: str | None
    ifname: str


@dataclass(frozen=True)
class TestbedInfo:
    name: str
    prefix: str
    topology: Topology
    hosts: tuple[HostEndpoint, ...]
    link_ends: tuple[LinkEnd, ...] = ()
    shaper: str = "none"

    def endpoint(self, host: str) -> HostEndpoint:
        for h in self.hosts:
            if h.host == host:
                return h
        raise KeyError(host)
