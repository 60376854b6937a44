"""Topology: hosts (running ranks), switches, and links with a shape. Pure data; see genie.topology for YAML."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from genie.core.hosts import RankedHosts


class SwitchKind(Enum):
    """How a switch node is realised: a plain L2 bridge, or an L3 router (static routes, ECMP)."""

    BRIDGE = "bridge"
    ROUTER = "router"


@dataclass(frozen=True)
class LinkShape:
    """What a link does to traffic in each direction. None / 0 means 'not shaped' for that property."""

    rate_bps: int | None = None
    delay_us: float = 0.0
    jitter_us: float = 0.0
    loss_pct: float = 0.0
    queue_packets: int | None = None
    mtu_bytes: int = 1500

    @property
    def needs_delay_emulation(self) -> bool:
        """True when the shape asks for more than a rate limit (netem or the userspace emulator)."""
        return self.delay_us > 0 or self.jitter_us > 0 or self.loss_pct > 0


@dataclass(frozen=True)
class Host:
    name: str
    ranks: int = 1


@dataclass(frozen=True)
class Switch:
    name: str
    kind: SwitchKind = SwitchKind.BRIDGE


class LinkRole(Enum):
    """What a link is in the machine it models: a NETWORK link (a NIC's cable, a fabric link between switches)
    or an INTRA_NODE link (NVLink / NVSwitch between a GPU and its node's switch). Emulated alike; told apart
    where they are measured and fitted separately (the fabric model's link classes)."""

    NETWORK = "network"
    INTRA_NODE = "intra_node"


@dataclass(frozen=True)
class Link:
    """A full-duplex link between two nodes (host or switch); `shape` applies to each direction."""

    a: str
    b: str
    shape: LinkShape = field(default_factory=LinkShape)
    role: LinkRole = LinkRole.NETWORK

    @property
    def endpoints(self) -> tuple[str, str]:
        return (self.a, self.b)


@dataclass(frozen=True)
class Topology(RankedHosts):
    name: str
    hosts: tuple[Host, ...]
    switches: tuple[Switch, ...] = ()
    links: tuple[Link, ...] = ()
    subnet: str = "198.18.0.0/15"

    def node_names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts) + tuple(s.name for s in self.switches)
