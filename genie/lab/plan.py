"""Topology -> the plan of a Vagrant lab: VMs, private networks, addresses and static routes. Pure.

The lab follows the emulated testbed's design (genie.testbed.layout / plan), with VMs instead of namespaces:
* every topology **host** is a VM that runs ranks; every **router** switch is a small VM that only forwards;
  every **bridge** switch is a small VM that bridges its NICs (``br0``) and shapes the egress of each of its
  ports, as the testbed's bridge namespace does;
* every **link** is a private network of its own with the two VMs of its ends (a host without links gets a
  network alone): the hypervisor only wires NICs together, it never plays a switch;
* every IP **segment** gets a **/24** from the topology's subnet, in order (bridged segments — the hosts and
  routers around a bridge, or around bridges linked to bridges —, then the other links in file order):
  segment *j* is the *j*-th /24. The networks of a bridged segment's links (the bridge VMs' ports) share its
  /24; they have no hypervisor side (libvirt ``veryisolated``) and their NICs carry the testbed's fixed veth
  MACs (`genie.testbed.userspace.veth_macs`), by which a bridge VM finds its ports and the userspace link
  emulator tells senders apart. A point-to-point link's /24 has ``.1`` left to the hypervisor (libvirt puts
  its side of the network there; VirtualBox internal networks need none but keep the rule). VMs take
  ``.10``, ``.11``, ... of their segment in link order; bridges take no address;
* a host's **rank address** is its address on its first link (a host without links — a one-host topology —
  still gets a network of its own);
* **routes**: every VM gets a /32 route to every host it is not attached to, through every equal-cost next
  hop (ECMP), from the hop-count shortest paths of genie.topology; routers and hosts that lie on other
  hosts' paths forward. No default routes are touched: the VM's management NIC keeps Vagrant's.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from enum import Enum
from itertools import combinations

from genie.core.errors import InputError
from genie.core.topology import Link, SwitchKind, Topology
from genie.testbed.userspace import veth_macs
from genie.topology.graph import bridged_segments
from genie.topology.routing import shortest_paths_next_hops
from genie.topology.validation import validate_topology

DEFAULT_BOX = "debian/bookworm64"
DEFAULT_MEMORY_MB = 2048
DEFAULT_CPUS = 2
DEFAULT_ROUTER_MEMORY_MB = 512
ROUTER_CPUS = 1
MIN_MEMORY_MB = 256
MIN_HOST_DEFAULT_MEMORY_MB = 1024  # genie with numpy, pandas and MPICH
SEGMENT_PREFIX_LEN = 24
HYPERVISOR_OFFSET = 1  # .1 of every /24
FIRST_VM_OFFSET = 10  # VMs from .10
MAX_SEGMENT_VMS = 254 - FIRST_VM_OFFSET + 1
DEFAULT_MTU_BYTES = 1500


class MachineRole(Enum):
    HOST = "host"  # runs ranks
    ROUTER = "router"  # a router switch of the topology: forwards only
    BRIDGE = "bridge"  # a bridge switch of the topology: bridges its NICs, shapes its ports


class NetworkKind(Enum):
    BRIDGE_PORT = "bridge-port"  # a link with a bridge at one end (or both): a port of a bridge VM
    POINT_TO_POINT = "point-to-point"  # a link between two hosts or routers
    ALONE = "alone"  # the network of a host without links


@dataclass(frozen=True)
class LabNetwork:
    """A Vagrant private network: one topology link (or a host without links). ``name`` is the libvirt network
    / VirtualBox internal network name; ``network`` the /24 of its IP segment (a bridged segment's is shared by
    the networks of all its links)."""

    name: str
    kind: NetworkKind
    network: str  # CIDR, a /24
    description: str  # what of the topology it stands for: "link h0 - s0 (bridge s0)", "link h0 - leaf0"
    members: tuple[tuple[str, str], ...]  # (machine, address) of its VMs that have one (bridges have none)
    mtu_bytes: int = DEFAULT_MTU_BYTES
    link_index: int | None = None  # the topology link it is (None: a host alone)
    macs: tuple[tuple[str, str], ...] = ()  # BRIDGE_PORT: (machine, MAC) of both ends, the testbed's veth MACs

    @property
    def netmask(self) -> str:
        return str(ipaddress.IPv4Network(self.network).netmask)

    @property
    def hypervisor_address(self) -> str:
        return str(ipaddress.IPv4Network(self.network).network_address + HYPERVISOR_OFFSET)

    @property
    def machines(self) -> tuple[str, ...]:
        """The VMs with a NIC on it (a bridge too), in link order."""
        if self.macs:
            return tuple(machine for machine, _ in self.macs)
        return tuple(machine for machine, _ in self.members)

    def address_of(self, machine: str) -> str | None:
        return dict(self.members).get(machine)

    def mac_of(self, machine: str) -> str | None:
        return dict(self.macs).get(machine)


@dataclass(frozen=True)
class LabRoute:
    destination: str  # a host's rank address as /32
    gateways: tuple[str, ...]  # several: an ECMP multipath route


@dataclass(frozen=True)
class LabMachine:
    name: str  # the topology node; the Vagrant machine name
    hostname: str  # ``name`` made a valid hostname ('_' -> '-')
    role: MachineRole
    ranks: int  # 0 for routers
    address: str | None  # the rank address (hosts)
    networks: tuple[str, ...]  # LabNetwork names, in the order the VM's NICs are defined (a bridge: its ports)
    routes: tuple[LabRoute, ...]
    forwards: bool
    multipath: bool
    memory_mb: int
    cpus: int


@dataclass(frozen=True)
class Lab:
    name: str
    topology: Topology
    box: str
    networks: tuple[LabNetwork, ...]  # one per link, in link order (then hosts without links)
    machines: tuple[LabMachine, ...]  # hosts in rank order, then switches (routers, bridges) in topology order

    @property
    def hosts(self) -> tuple[LabMachine, ...]:
        return tuple(m for m in self.machines if m.role is MachineRole.HOST)

    @property
    def routers(self) -> tuple[LabMachine, ...]:
        return tuple(m for m in self.machines if m.role is MachineRole.ROUTER)

    @property
    def bridges(self) -> tuple[LabMachine, ...]:
        return tuple(m for m in self.machines if m.role is MachineRole.BRIDGE)

    def network(self, name: str) -> LabNetwork:
        for network in self.networks:
            if network.name == name:
                return network
        raise KeyError(name)

    def end_address(self, link_index: int, node: str) -> str | None:
        """The address of `node`'s NIC for topology link `link_index` (None for a bridge: its ports have none)."""
        return self.link_network(link_index).address_of(node)

    def end_mac(self, link_index: int, node: str) -> str | None:
        """The fixed MAC of `node`'s NIC for topology link `link_index` (links with a bridge end only)."""
        return self.link_network(link_index).mac_of(node)

    def link_network(self, link_index: int) -> LabNetwork:
        for network in self.networks:
            if network.link_index == link_index:
                return network
        raise KeyError(link_index)

    def machine(self, name: str) -> LabMachine:
        for machine in self.machines:
            if machine.name == name:
                return machine
        raise KeyError(name)

    def primary_network(self, host: str) -> LabNetwork:
        """The network holding the host's rank address."""
        machine = next(m for m in self.machines if m.name == host)
        for network in self.networks:
            if network.address_of(host) == machine.address:
                return network
        raise KeyError(host)


@dataclass(frozen=True)
class LabSizing:
    """The size of every VM of one role: host VMs, and switch VMs (routers and bridges: ``router_*``)."""

    memory_mb: int = DEFAULT_MEMORY_MB
    cpus: int = DEFAULT_CPUS
    router_memory_mb: int = DEFAULT_ROUTER_MEMORY_MB
    router_cpus: int = ROUTER_CPUS


def default_sizing(topology: Topology, *, host_memory_mb: int, host_cpus: int) -> LabSizing:
    """VM sizes that fit the workstation: switch VMs (routers and bridges) get 512 MiB and 1 CPU; host VMs share
    three quarters of its memory left after the switches (1-2 GiB each, in 256 MiB steps) and its CPUs (1-2
    each)."""
    hosts = max(1, len(topology.hosts))
    budget_mb = host_memory_mb * 3 // 4 - len(topology.switches) * DEFAULT_ROUTER_MEMORY_MB
    memory_mb = min(DEFAULT_MEMORY_MB, max(MIN_HOST_DEFAULT_MEMORY_MB, budget_mb // hosts // 256 * 256))
    return LabSizing(memory_mb, min(DEFAULT_CPUS, max(1, host_cpus // hosts)))


def sizing_warnings(lab: Lab, *, host_memory_mb: int, host_cpus: int) -> list[str]:
    """Why the lab may not fit the workstation: its VMs' memory beyond 90% of the host's, or more vCPUs than
    the host has CPUs (the VMs then share CPUs, and timings suffer)."""
    memory_mb = sum(m.memory_mb for m in lab.machines)
    cpus = sum(m.cpus for m in lab.machines)
    warnings = []
    if memory_mb > host_memory_mb * 0.9:
        warnings.append(f"the lab's {len(lab.machines)} VMs take {memory_mb} MiB of memory and this machine has "
                        f"{host_memory_mb} MiB: lower `memory_mb` / `router_memory_mb`, or use a larger host")
    if cpus > host_cpus:
        warnings.append(f"the lab's VMs have {cpus} vCPUs and this machine has {host_cpus} CPUs: they will "
                        "share them, and timings measured in the lab will suffer (`cpus`, `router_cpus`)")
    return warnings


def plan_lab(topology: Topology, *, box: str = DEFAULT_BOX, memory_mb: int = DEFAULT_MEMORY_MB,
             cpus: int = DEFAULT_CPUS, router_memory_mb: int = DEFAULT_ROUTER_MEMORY_MB,
             router_cpus: int = ROUTER_CPUS, source: str | None = None) -> Lab:
    """The lab for `topology`. InputError (naming `source`) when the subnet cannot hold a /24 per segment.
    ``router_memory_mb`` / ``router_cpus`` size every switch VM (routers and bridges)."""
    _check_options(box, memory_mb, cpus, router_memory_mb, router_cpus)
    validate_topology(topology, source=source or "<topology>")
    networks, primary = _networks(topology, source)
    routes, forwarders = _routes(topology, networks, primary)
    hostnames = _hostnames(topology)
    machines = []
    for node, role in ([(h.name, MachineRole.HOST) for h in topology.hosts]
                       + [(s.name, _SWITCH_ROLE[s.kind]) for s in topology.switches]):
        host = role is MachineRole.HOST
        node_routes = tuple(routes.get(node, ()))
        machines.append(LabMachine(
            name=node, hostname=hostnames[node], role=role, ranks=topology.host(node).ranks if host else 0,
            address=primary[node] if host else None,
            networks=tuple(n.name for n in networks if node in n.machines),
            routes=node_routes, forwards=role is MachineRole.ROUTER or node in forwarders,
            multipath=any(len(r.gateways) > 1 for r in node_routes),
            memory_mb=memory_mb if host else router_memory_mb, cpus=cpus if host else router_cpus))
    return Lab(topology.name, topology, box, tuple(networks), tuple(machines))


_SWITCH_ROLE = {SwitchKind.ROUTER: MachineRole.ROUTER, SwitchKind.BRIDGE: MachineRole.BRIDGE}


def _check_options(box: str, memory_mb: int, cpus: int, router_memory_mb: int, router_cpus: int) -> None:
    if not isinstance(box, str) or not box.strip() or any(c.isspace() for c in box):
        raise InputError(f"expected a Vagrant box name such as {DEFAULT_BOX}, got {box!r}", path="box")
    for value, option in ((memory_mb, "memory_mb"), (router_memory_mb, "router_memory_mb")):
        if isinstance(value, bool) or not isinstance(value, int) or value < MIN_MEMORY_MB:
            raise InputError(f"expected the memory of a VM in MiB (an integer >= {MIN_MEMORY_MB}), got {value!r}",
                             path=option)
    for value, option, role in ((cpus, "cpus", "host"), (router_cpus, "router_cpus", "switch (router or bridge)")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"expected the number of CPUs of a {role} VM (an integer >= 1), got {value!r}",
                             path=option)


def _hostnames(topology: Topology) -> dict[str, str]:
    """Node names are letters, digits, '-' and '_'; hostnames may not hold '_' nor end with '-'."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for node in topology.node_names():
        base = node.replace("_", "-").rstrip("-") or "node"
        name, n = base, 1
        while name.lower() in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name.lower())
        names[node] = name
    return names


def _networks(topology: Topology, source: str | None) -> tuple[list[LabNetwork], dict[str, str]]:
    """The lab's networks (one per link, then one per host without links) and every host's rank address."""
    bridge_names = {s.name for s in topology.switches if s.kind is SwitchKind.BRIDGE}
    segment_of_bridge = bridged_segments(topology)
    # IP segments as the testbed orders them: bridged segments (in switch order), the other links, lone hosts
    segments: list[tuple[str, list[str]]] = []  # (what it stands for, its L3 members in link order)
    segment_of: dict[int, int] = {}  # bridged segment number -> index in `segments`
    for bridge in (s.name for s in topology.switches if s.name in bridge_names):
        if segment_of_bridge[bridge] not in segment_of:
            segment_of[segment_of_bridge[bridge]] = len(segments)
            members = sorted((b for b, s in segment_of_bridge.items() if s == segment_of_bridge[bridge]),
                             key=topology.node_names().index)
            segments.append((f"bridge{'s' if len(members) > 1 else ''} {', '.join(members)}", []))
    link_segment: list[int] = []
    for link in topology.links:
        bridges_here = [end for end in link.endpoints if end in bridge_names]
        if bridges_here:
            link_segment.append(segment_of[segment_of_bridge[bridges_here[0]]])
        else:
            link_segment.append(len(segments))
            segments.append((f"link {link.a} - {link.b}", []))
        segments[link_segment[-1]][1].extend(end for end in link.endpoints if end not in bridge_names)
    linked = {end for link in topology.links for end in link.endpoints}
    lone = [host.name for host in topology.hosts if host.name not in linked]
    blocks = _blocks(topology.subnet, len(segments) + len(lone), source)
    for description, members in segments:
        if len(members) > MAX_SEGMENT_VMS:
            raise InputError(f"{description} has {len(members)} hosts and routers but a lab /24 holds at most "
                             f"{MAX_SEGMENT_VMS} VMs (.{FIRST_VM_OFFSET}-.254)", source=source, path="links")
    taken = [0] * len(segments)  # addresses given in each segment so far
    ports = [0] * len(segments)  # bridge-port networks in each segment so far
    networks: list[LabNetwork] = []
    primary: dict[str, str] = {}
    for index, (link, j) in enumerate(zip(topology.links, link_segment)):
        block = blocks[j]
        members = []
        for end in link.endpoints:
            if end not in bridge_names:
                members.append((end, str(block.network_address + FIRST_VM_OFFSET + taken[j])))
                taken[j] += 1
                primary.setdefault(end, members[-1][1])
        name = f"genie-{topology.name}-net{j}"
        if any(end in bridge_names for end in link.endpoints):
            name, kind = f"{name}-{ports[j]}", NetworkKind.BRIDGE_PORT
            ports[j] += 1
            description = f"link {link.a} - {link.b} ({segments[j][0]})"
            macs = tuple(zip(link.endpoints, veth_macs(index)))
        else:
            kind, description, macs = NetworkKind.POINT_TO_POINT, segments[j][0], ()
        networks.append(LabNetwork(name, kind, str(block), description, tuple(members), link.shape.mtu_bytes,
                                   index, macs))
    for k, host in enumerate(lone):
        j = len(segments) + k
        address = str(blocks[j].network_address + FIRST_VM_OFFSET)
        networks.append(LabNetwork(f"genie-{topology.name}-net{j}", NetworkKind.ALONE, str(blocks[j]),
                                   f"host {host} (no links)", ((host, address),)))
        primary[host] = address
    return networks, primary


def _blocks(subnet: str, count: int, source: str | None) -> list[ipaddress.IPv4Network]:
    network = ipaddress.IPv4Network(subnet)
    available = 2 ** (SEGMENT_PREFIX_LEN - network.prefixlen) if network.prefixlen <= SEGMENT_PREFIX_LEN else 0
    if count > available:
        needed = SEGMENT_PREFIX_LEN - math.ceil(math.log2(max(count, 1)))
        raise InputError(f"a lab gives every network segment its own /24 and this topology has {count} segments, "
                         f"which {network} cannot hold; expected a /{needed} or larger subnet such as "
                         "198.18.0.0/15", source=source, path="subnet")
    start = int(network.network_address)
    return [ipaddress.IPv4Network((start + j * 2 ** (32 - SEGMENT_PREFIX_LEN), SEGMENT_PREFIX_LEN))
            for j in range(count)]




def _routes(topology: Topology, networks: list[LabNetwork],
            primary: dict[str, str]) -> tuple[dict[str, list[LabRoute]], set[str]]:
    """Per VM, a /32 route to every host whose rank segment it is not on; and the hosts that forward."""
    routers = tuple(s for s in topology.switches if s.kind is SwitchKind.ROUTER)
    hosts = {h.name for h in topology.hosts}
    segments: dict[str, list[tuple[str, str]]] = {}  # as IP sees it: a /24 and who has an address in it
    for network in networks:
        segments.setdefault(network.network, []).extend(network.members)
    shared: dict[frozenset[str], list[list[tuple[str, str]]]] = {}
    l3_links: list[Link] = []
    for members in segments.values():
        for (a, _), (b, _) in combinations(members, 2):
            pair = frozenset((a, b))
            if a == b or members in shared.get(pair, []):
                continue
            if pair not in shared:
                l3_links.append(Link(a, b))
            shared.setdefault(pair, []).append(members)
    # bridges vanish, every pair of VMs on one segment is one hop apart
    l3 = Topology(topology.name, topology.hosts, routers, tuple(l3_links), topology.subnet)
    next_hops = shortest_paths_next_hops(l3)
    segment_of_address = {address: members for members in segments.values() for _, address in members}
    routes: dict[str, list[LabRoute]] = {}
    forwarders: set[str] = set()
    for node in [h.name for h in topology.hosts] + [r.name for r in routers]:
        for dst in topology.hosts:
            if dst.name == node or any(m == node for m, _ in segment_of_address[primary[dst.name]]):
                continue
            hops = next_hops.get((node, dst.name))
            if not hops:
                raise InputError(f"host {dst.name!r} cannot be reached from {node!r}", path="links")
            gateways: list[str] = []
            for hop in hops:
                if hop in hosts and hop != dst.name:
                    forwarders.add(hop)
                gateways.extend(address for members in shared[frozenset((node, hop))]
                                for m, address in members if m == hop)
            routes.setdefault(node, []).append(LabRoute(f"{primary[dst.name]}/32", tuple(gateways)))
    return routes, forwarders
