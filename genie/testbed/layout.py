"""Names and addresses of a testbed, decided before anything is built. Pure.

* Namespaces: ``genie-<testbed>-<node>``, one per host and per switch.
* Interfaces: inside every namespace ``eth0, eth1, ...`` in the order the node appears in ``topology.links``;
  a bridge switch also has ``br0``. A host's ``eth0`` carries the address its ranks listen on.
* Segments: every bridged segment (bridges linked to bridges form one) is one subnet shared by the hosts and
  routers attached to it; every other link (host-host, host-router, router-router) is a point-to-point subnet.
  Subnets come from ``topology.subnet``: /24 per bridged segment (larger if needed) and /30 per point-to-point
  link when they fit, otherwise the tightest blocks (/31 links).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import Enum

from genie.core.errors import InputError
from genie.core.topology import SwitchKind, Topology
from genie.topology.graph import bridged_segments

NETNS_PREFIX = "genie-"
NETNS_DIR = "/run/netns"  # where named namespaces live (ip netns, pyroute2)
TESTBED_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
BRIDGE_IFNAME = "br0"
MAX_IFNAME_CHARS = 15
#: the scratch namespaces `up` probes the kernel in are ``genie-probe-<pid>-<start ticks>`` (`probe_netns_name`):
#: no testbed may be named so that its namespaces could take such a name
PROBE_NAME = "probe"
_PROBE_NETNS = re.compile(rf"{NETNS_PREFIX}{PROBE_NAME}-(\d+)-(\d+)")


class SegmentKind(Enum):
    BRIDGED = "bridged"
    POINT_TO_POINT = "point-to-point"
    LOOPBACK = "loopback"  # a host without links: its address lives on lo


@dataclass(frozen=True)
class Attachment:
    """An L3 interface (of a host or router) on a segment."""

    node: str
    ifname: str
    address: str


@dataclass(frozen=True)
class Segment:
    kind: SegmentKind
    network: str  # CIDR
    members: tuple[Attachment, ...]

    @property
    def prefix_len(self) -> int:
        return int(self.network.split("/")[1])

    def member(self, node: str) -> Attachment | None:
        for attachment in self.members:
            if attachment.node == node:
                return attachment
        return None


@dataclass(frozen=True)
class EndLayout:
    """One end of topology link ``link_index``: interface ``ifname`` of ``node`` in ``netns``. ``bridge`` is
    set when the node is a bridge switch (the interface is a port of it); otherwise ``address``/``prefix_len``."""

    link_index: int
    node: str
    peer: str
    netns: str
    ifname: str
    address: str | None = None
    prefix_len: int | None = None
    bridge: str | None = None


@dataclass(frozen=True)
class TestbedLayout:
    name: str
    topology: Topology
    netns: tuple[tuple[str, str], ...]  # (node, namespace) for hosts, then switches
    ends: tuple[EndLayout, ...]  # two per link: the a end, then the b end
    segments: tuple[Segment, ...]
    host_addresses: tuple[tuple[str, str], ...]  # (host, address its ranks listen on)

    def netns_of(self, node: str) -> str:
        return dict(self.netns)[node]

    def address_of(self, host: str) -> str:
        return dict(self.host_addresses)[host]

    def primary_segment(self, host: str) -> Segment:
        """The segment holding the host's rank address (its eth0, or lo when it has no link)."""
        address = self.address_of(host)
        for segment in self.segments:
            member = segment.member(host)
            if member is not None and member.address == address:
                return segment
        raise KeyError(host)


def testbed_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not TESTBED_NAME_PATTERN.fullmatch(name):
        return (f"expected a testbed name of 1-32 letters, digits, '-' or '_' starting with a letter or digit, "
                f"got {name!r}")
    if name == PROBE_NAME or name.startswith(f"{PROBE_NAME}-"):
        return (f"testbed names {PROBE_NAME!r} and {PROBE_NAME}-* are genie's own (its kernel probes' scratch "
                f"namespaces are {NETNS_PREFIX}{PROBE_NAME}-<pid>-<start>), got {name!r}")
    return None


def check_testbed_name(name: object) -> str:
    if problem := testbed_name_problem(name):
        raise InputError(problem, path="name")
    return name  # type: ignore[return-value]


def netns_name(testbed: str, node: str) -> str:
    return f"{NETNS_PREFIX}{testbed}-{node}"


def probe_netns_name(pid: int, start_ticks: int | None) -> str:
    """The scratch namespace process `pid` (started at `start_ticks`) probes the kernel in."""
    return f"{NETNS_PREFIX}{PROBE_NAME}-{pid}-{start_ticks or 0}"


def probe_owner(netns: str) -> tuple[int, int] | None:
    """(pid, start ticks) of the process whose probe namespace `netns` is, None if it is not one."""
    found = _PROBE_NETNS.fullmatch(netns)
    return None if found is None else (int(found[1]), int(found[2]))


def ifname(index: int) -> str:
    return f"eth{index}"


def plan_layout(topology: Topology, name: str) -> TestbedLayout:
    """Namespaces, interface names and addresses for `topology` (validated) as testbed `name`."""
    check_testbed_name(name)
    bridge_names = {s.name for s in topology.switches if s.kind is SwitchKind.BRIDGE}
    netns = tuple((node, netns_name(name, node)) for node in topology.node_names())
    port_count = {node: 0 for node in topology.node_names()}
    end_ifnames: list[tuple[str, str]] = []  # (a ifname, b ifname) per link
    for link in topology.links:
        names = []
        for node in link.endpoints:
            names.append(ifname(port_count[node]))
            port_count[node] += 1
        end_ifnames.append((names[0], names[1]))

    segment_of_bridge = bridged_segments(topology)
    bridged: dict[int, list[tuple[str, str]]] = {n: [] for n in sorted(set(segment_of_bridge.values()))}
    p2p: list[list[tuple[str, str]]] = []
    for link, pair in zip(topology.links, end_ifnames):
        attached = [(node, ifn) for node, ifn in zip(link.endpoints, pair) if node not in bridge_names]
        bridges_here = [node for node in link.endpoints if node in bridge_names]
        if not bridges_here:
            p2p.append(attached)
        else:
            bridged[segment_of_bridge[bridges_here[0]]].extend(attached)
    linked = {node for link in topology.links for node in link.endpoints}
    loopback = [[(h.name, "lo")] for h in topology.hosts if h.name not in linked]

    groups = ([(SegmentKind.BRIDGED, members) for members in bridged.values() if members]
              + [(SegmentKind.POINT_TO_POINT, members) for members in p2p]
              + [(SegmentKind.LOOPBACK, members) for members in loopback])
    segments = _allocate(topology.subnet, groups)

    address_by_interface = {(m.node, m.ifname): m for s in segments for m in s.members}
    prefix_by_interface = {(m.node, m.ifname): s.prefix_len for s in segments for m in s.members}
    ns = dict(netns)
    ends: list[EndLayout] = []
    for index, (link, pair) in enumerate(zip(topology.links, end_ifnames)):
        for node, peer, ifn in ((link.a, link.b, pair[0]), (link.b, link.a, pair[1])):
            if node in bridge_names:
                ends.append(EndLayout(index, node, peer, ns[node], ifn, bridge=BRIDGE_IFNAME))
            else:
                ends.append(EndLayout(index, node, peer, ns[node], ifn, address_by_interface[(node, ifn)].address,
                                      prefix_by_interface[(node, ifn)]))
    host_addresses = []
    for host in topology.hosts:
        primary = "eth0" if host.name in linked else "lo"
        host_addresses.append((host.name, address_by_interface[(host.name, primary)].address))
    return TestbedLayout(name, topology, netns, tuple(ends), segments, tuple(host_addresses))


def _prefix_for(kind: SegmentKind, members: int, *, readable: bool) -> int:
    if kind is SegmentKind.LOOPBACK:
        return 32
    if kind is SegmentKind.POINT_TO_POINT:
        return 30 if readable else 31
    prefix = 32 - (members + 1).bit_length()  # room for members + network + broadcast
    return min(prefix, 24) if readable else prefix


def _allocate(subnet: str, groups: list[tuple[SegmentKind, list[tuple[str, str]]]]) -> tuple[Segment, ...]:
    network = ipaddress.IPv4Network(subnet)
    for readable in (True, False):
        prefixes = [_prefix_for(kind, len(members), readable=readable) for kind, members in groups]
        # largest blocks first keeps every block aligned; ties keep topology order
        order = sorted(range(len(groups)), key=lambda i: prefixes[i])
        if sum(2 ** (32 - p) for p in prefixes) > network.num_addresses:
            continue
        start = int(network.network_address)
        blocks: dict[int, ipaddress.IPv4Network] = {}
        for i in order:
            blocks[i] = ipaddress.IPv4Network((start, prefixes[i]))
            start += 2 ** (32 - prefixes[i])
        segments = []
        for i, (kind, members) in enumerate(groups):
            block = blocks[i]
            first = 0 if block.prefixlen >= 31 else 1
            attachments = tuple(Attachment(node, ifn, str(block.network_address + first + k))
                                for k, (node, ifn) in enumerate(members))
            segments.append(Segment(kind, str(block), attachments))
        return tuple(segments)
    raise InputError(f"subnet {subnet} is too small for the testbed's {len(groups)} segments; use a larger subnet "
                     "such as 198.18.0.0/15", path="subnet")
