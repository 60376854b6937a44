"""What a live testbed looks like when inspected: link counters and per-namespace status. Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from genie.core.testbed import LinkEnd


@dataclass(frozen=True)
class LinkCounters:
    """Kernel counters of one link end. TX is the direction end.node -> end.peer. ``qdisc_drops`` are packets
    the end's shaping qdiscs dropped (queue overflow, emulated loss)."""

    end: LinkEnd
    tx_bytes: int
    tx_packets: int
    tx_drops: int
    rx_bytes: int
    rx_packets: int
    rx_drops: int
    qdisc_drops: int = 0


@dataclass(frozen=True)
class TcpConnectionInfo:
    """One established TCP connection's state as the kernel reports it (sock_diag's tcp_info, what `ss -tin`
    prints): its congestion window and smoothed RTT."""

    cwnd_segments: int
    srtt_us: int


@dataclass(frozen=True)
class QdiscStatus:
    kind: str  # as the kernel names it: htb, netem, pfifo, noqueue...
    handle: str  # "1:"
    parent: str  # "root" or "1:1"
    rate_bps: int | None = None  # the HTB class rate, for htb
    detail: str = ""  # e.g. "delay 100us jitter 10us loss 0.1% limit 1000"


@dataclass(frozen=True)
class InterfaceStatus:
    ifname: str
    kind: str  # veth, bridge, loopback
    up: bool
    mtu_bytes: int
    addresses: tuple[str, ...]  # CIDRs
    master: str | None = None
    qdiscs: tuple[QdiscStatus, ...] = ()


@dataclass(frozen=True)
class RouteStatus:
    destination: str
    nexthops: tuple[str, ...]  # "via 198.18.0.2 dev eth0" or "dev eth1"


@dataclass(frozen=True)
class NamespaceStatus:
    netns: str
    present: bool
    interfaces: tuple[InterfaceStatus, ...] = ()
    routes: tuple[RouteStatus, ...] = ()
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class EmulatorStatus:
    """A link emulator of a testbed: its process and its last written counters (None before the first)."""

    netns: str
    pid: int
    running: bool
    stats: dict[str, Any] | None = None
