"""An in-memory model of what the plan steps make in the kernel, for fakes that drive the real testbed code.

`KernelModel` keeps namespaces with their interfaces (loopback, veths with their peer end, bridges), addresses,
routes, sysctls, qdiscs and HTB classes, NFQUEUE rules, and the link-emulator processes, and changes them the
way the kernel (through `genie.testbed.netlink` and `genie.testbed.emulators`) does: applying a step adds its
objects or fails leaving nothing (a duplicate namespace, interface, address, route or root qdisc is EEXIST, a
missing namespace or interface ENOENT/ENODEV, a gateway off every connected subnet ENETUNREACH); undoing
removes them and tolerates that they are gone. Deleting one veth end deletes its peer; removing a namespace
deletes its interfaces (and so the peers of its veths); taking an interface down or deleting it drops the
routes through it. `inspect_namespace` answers as `netlink.inspect_namespace` does.
"""

from __future__ import annotations

import errno
import ipaddress
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from genie.testbed.layout import NETNS_PREFIX
from genie.testbed.observed import InterfaceStatus, NamespaceStatus, QdiscStatus, RouteStatus
from genie.testbed.steps import (AddAddress, AddBridge, AddHtb, AddNetem, AddPfifo, AddQueueRule, AddRoute,
                                 CreateNetns, CreateVethPair, EnslaveLink, PlanStep, QdiscParent, SetLinkUp,
                                 SetSysctl, StartEmulator)

FAKE_PID_BASE = 2**22 + 1  # above the kernel's largest pid_max: a fake PID is never a real process
LOOPBACK_MTU_BYTES = 65536
LOOPBACK_CIDR = "127.0.0.1/8"
DEFAULT_MTU_BYTES = 1500
LeafQdisc = AddNetem | AddPfifo


def _error(code: int, text: str) -> OSError:
    exc_type = {errno.EEXIST: FileExistsError, errno.ENOENT: FileNotFoundError,
                errno.ENODEV: FileNotFoundError}.get(code, OSError)
    return exc_type(code, text)


@dataclass
class Interface:
    kind: str  # loopback, veth, bridge
    mtu_bytes: int = DEFAULT_MTU_BYTES
    up: bool = False
    mac: str | None = None
    master: str | None = None
    peer: tuple[str, str] | None = None  # (netns, ifname) of a veth's other end
    addresses: list[str] = field(default_factory=list)  # CIDRs, in the order added
    htb: AddHtb | None = None  # root qdisc 1: with class 1:1
    leaf: LeafQdisc | None = None  # qdisc 10: at the root or under class 1:1
    ack_leaf: AddNetem | None = None  # qdisc 20: under the ACK lane 1:2


@dataclass
class Namespace:
    interfaces: dict[str, Interface] = field(default_factory=dict)
    routes: dict[str, AddRoute] = field(default_factory=dict)  # static routes by destination
    sysctls: dict[str, str] = field(default_factory=dict)
    queue_rules: list[tuple[str, int]] = field(default_factory=list)  # (ifname, queue number)
    inode: int = 0  # the namespace's identity: a new one every time a namespace is made


@dataclass
class KernelModel:
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    processes: dict[int, str] = field(default_factory=dict)  # PID -> namespace it was started in
    _pids: itertools.count[int] = field(default_factory=lambda: itertools.count(FAKE_PID_BASE))
    _inodes: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # ---- queries ---------------------------------------------------------------------------------------------
    def netns_exists(self, name: str) -> bool:
        return name in self.namespaces

    def namespace_identity(self, name: str) -> tuple[int, int] | None:
        return (0, self.namespaces[name].inode) if name in self.namespaces else None

    def genie_namespaces(self) -> list[str]:
        return sorted(name for name in self.namespaces if name.startswith(NETNS_PREFIX))

    def namespace_pids(self, name: str) -> list[int]:
        if name not in self.namespaces:
            return []
        return sorted(pid for pid, netns in self.processes.items() if netns == name)

    def interface(self, netns: str, ifname: str) -> Interface:
        ns = self._namespace(netns)
        if ifname not in ns.interfaces:
            raise _error(errno.ENODEV, f"{netns}: no interface {ifname}")
        return ns.interfaces[ifname]

    def is_empty(self) -> bool:
        return not self.namespaces and not self.processes

    def inspect_namespace(self, name: str) -> NamespaceStatus:
        if name not in self.namespaces:
            return NamespaceStatus(name, present=False)
        ns = self.namespaces[name]
        interfaces = tuple(InterfaceStatus(ifname, i.kind, i.up, i.mtu_bytes, tuple(i.addresses), i.master,
                                           _qdiscs(i)) for ifname, i in ns.interfaces.items())
        return NamespaceStatus(name, True, interfaces, tuple(self._routes(ns)), tuple(self.namespace_pids(name)))

    # ---- steps -----------------------------------------------------------------------------------------------
    def apply(self, step: PlanStep, on_started: Callable[[int, str], None] | None = None) -> None:
        """Make `step` real in the model, or raise leaving the model as it was. ``on_started(pid, netns)`` is
        told of an emulator process started."""
        match step:
            case CreateNetns(netns=name):
                if name in self.namespaces:
                    raise _error(errno.EEXIST, f"namespace {name} already exists")
                self.namespaces[name] = Namespace({"lo": Interface("loopback", LOOPBACK_MTU_BYTES)},
                                                  inode=next(self._inodes))
            case SetSysctl(netns=name, key=key, value=value):
                self._namespace(name).sysctls[key] = value
            case SetLinkUp(netns=name, ifname=ifname):
                interface = self.interface(name, ifname)
                interface.up = True
                if interface.kind == "loopback" and LOOPBACK_CIDR not in interface.addresses:
                    interface.addresses.insert(0, LOOPBACK_CIDR)
            case AddBridge(netns=name, ifname=ifname):
                self._free_name(name, ifname)
                self.namespaces[name].interfaces[ifname] = Interface("bridge")
            case CreateVethPair():
                self._free_name(step.netns_a, step.ifname_a)
                self._free_name(step.netns_b, step.ifname_b)
                if (step.netns_a, step.ifname_a) == (step.netns_b, step.ifname_b):
                    raise _error(errno.EEXIST, f"{step.netns_a}: interface {step.ifname_a} exists")
                self.namespaces[step.netns_a].interfaces[step.ifname_a] = Interface(
                    "veth", step.mtu_bytes, mac=step.mac_a, peer=(step.netns_b, step.ifname_b))
                self.namespaces[step.netns_b].interfaces[step.ifname_b] = Interface(
                    "veth", step.mtu_bytes, mac=step.mac_b, peer=(step.netns_a, step.ifname_a))
            case EnslaveLink(netns=name, ifname=ifname, bridge=bridge):
                interface = self.interface(name, ifname)
                if self.interface(name, bridge).kind != "bridge":
                    raise _error(errno.EOPNOTSUPP, f"{name}: {bridge} is not a bridge")
                interface.master = bridge
            case AddAddress(netns=name, ifname=ifname):
                interface = self.interface(name, ifname)
                if any(cidr.split("/")[0] == step.address for cidr in interface.addresses):
                    raise _error(errno.EEXIST, f"{name}: address {step.address} exists on {ifname}")
                interface.addresses.append(step.cidr)
            case AddRoute(netns=name):
                self._add_route(step)
            case AddHtb(netns=name, ifname=ifname):
                interface = self.interface(name, ifname)
                if interface.htb is not None or interface.leaf is not None:
                    raise _error(errno.EEXIST, f"{name}: {ifname} already has a root qdisc")
                interface.htb = step
            case AddNetem(netns=name, ifname=ifname) | AddPfifo(netns=name, ifname=ifname):
                interface = self.interface(name, ifname)
                if step.parent is not QdiscParent.ROOT and interface.htb is None:
                    raise _error(errno.ENOENT, f"{name}: {ifname} has no HTB class {step.parent.value}")
                if step.parent is QdiscParent.ACK_CLASS:
                    if interface.ack_leaf is not None or not isinstance(step, AddNetem):
                        raise _error(errno.EEXIST, f"{name}: {ifname} already has that qdisc")
                    interface.ack_leaf = step
                    return
                if interface.leaf is not None or (step.parent is QdiscParent.ROOT and interface.htb is not None):
                    raise _error(errno.EEXIST, f"{name}: {ifname} already has that qdisc")
                interface.leaf = step
            case AddQueueRule(netns=name, ifname=ifname, queue_num=queue_num):
                self._namespace(name).queue_rules.append((ifname, queue_num))
            case StartEmulator(netns=name):
                self._namespace(name)
                if name in self.processes.values():
                    raise _error(errno.EBUSY, f"{name}: a link emulator already holds its queues")
                pid = next(self._pids)
                self.processes[pid] = name
                if on_started is not None:
                    on_started(pid, name)
            case _:
                raise TypeError(f"unknown step {step!r}")

    def undo(self, step: PlanStep) -> None:
        """Revert `step`; what is already gone (objects, whole namespaces) counts as undone."""
        if isinstance(step, CreateNetns):
            self.remove_namespace(step.netns)
            return
        if isinstance(step, StartEmulator):
            for pid in [pid for pid, netns in self.processes.items() if netns == step.netns]:
                del self.processes[pid]
            return
        if isinstance(step, CreateVethPair):
            for netns, ifname in ((step.netns_a, step.ifname_a), (step.netns_b, step.ifname_b)):
                if self._find(netns, ifname) is not None:
                    self._delete_interface(netns, ifname)
            return
        ns = self.namespaces.get(step.netns)
        if ns is None:
            return
        if isinstance(step, SetSysctl):
            return  # a namespace's sysctls vanish with it
        if isinstance(step, AddRoute):
            ns.routes.pop(step.destination, None)
            return
        if isinstance(step, AddQueueRule):
            if (step.ifname, step.queue_num) in ns.queue_rules:
                ns.queue_rules.remove((step.ifname, step.queue_num))
            return
        interface = ns.interfaces.get(step.ifname)
        if interface is None:
            return
        match step:
            case SetLinkUp(ifname=ifname):
                interface.up = False
                self._drop_routes_through(step.netns, ifname)
            case EnslaveLink():
                interface.master = None
            case AddBridge(ifname=ifname):
                self._delete_interface(step.netns, ifname)
            case AddAddress():
                if step.cidr in interface.addresses:
                    interface.addresses.remove(step.cidr)
            case AddHtb():
                interface.htb = None
                interface.leaf = interface.ack_leaf = None  # everything under the root goes with it
            case AddNetem(parent=QdiscParent.ACK_CLASS):
                interface.ack_leaf = None
            case AddNetem() | AddPfifo():
                interface.leaf = None
            case _:
                raise TypeError(f"unknown step {step!r}")

    def remove_namespace(self, name: str) -> bool:
        """Remove namespace `name` and its interfaces (their veth peers elsewhere go too); its processes live on
        as the kernel's would, outside any named namespace."""
        ns = self.namespaces.get(name)
        if ns is None:
            return False
        for ifname in list(ns.interfaces):
            if ifname in ns.interfaces:
                self._delete_interface(name, ifname)
        del self.namespaces[name]
        return True

    def end_processes(self, pids: list[int]) -> list[int]:
        ended = [pid for pid in dict.fromkeys(pids) if pid in self.processes]
        for pid in ended:
            del self.processes[pid]
        return ended

    # ---- inside ----------------------------------------------------------------------------------------------
    def _namespace(self, name: str) -> Namespace:
        if name not in self.namespaces:
            raise _error(errno.ENOENT, f"namespace {name} does not exist")
        return self.namespaces[name]

    def _find(self, netns: str, ifname: str) -> Interface | None:
        ns = self.namespaces.get(netns)
        return ns.interfaces.get(ifname) if ns is not None else None

    def _free_name(self, netns: str, ifname: str) -> None:
        if ifname in self._namespace(netns).interfaces:
            raise _error(errno.EEXIST, f"{netns}: interface {ifname} exists")

    def _delete_interface(self, netns: str, ifname: str) -> None:
        ns = self.namespaces[netns]
        interface = ns.interfaces.pop(ifname)
        self._drop_routes_through(netns, ifname)
        for other in ns.interfaces.values():
            if other.master == ifname:
                other.master = None
        if interface.peer is not None and self._find(*interface.peer) is not None:
            self._delete_interface(*interface.peer)

    def _drop_routes_through(self, netns: str, ifname: str) -> None:
        ns = self.namespaces[netns]
        for destination, route in list(ns.routes.items()):
            if any(hop.ifname == ifname for hop in route.nexthops):
                del ns.routes[destination]

    def _add_route(self, step: AddRoute) -> None:
        ns = self._namespace(step.netns)
        if step.destination in ns.routes:
            raise _error(errno.EEXIST, f"{step.netns}: route to {step.destination} exists")
        for hop in step.nexthops:
            interface = self.interface(step.netns, hop.ifname)
            if not interface.up:
                raise _error(errno.ENETDOWN, f"{step.netns}: nexthop device {hop.ifname} is not up")
            if hop.gateway is not None and not any(
                    ipaddress.ip_address(hop.gateway) in ipaddress.ip_interface(cidr).network
                    for cidr in interface.addresses):
                raise _error(errno.ENETUNREACH, f"{step.netns}: gateway {hop.gateway} is not on {hop.ifname}")
        if step.source is not None and not any(cidr.split("/")[0] == step.source
                                               for i in ns.interfaces.values() for cidr in i.addresses):
            raise _error(errno.EINVAL, f"{step.netns}: preferred source {step.source} is no local address")
        ns.routes[step.destination] = step

    @staticmethod
    def _routes(ns: Namespace) -> list[RouteStatus]:
        """The main table as the kernel lists it: connected subnets of up interfaces, then static routes."""
        routes = []
        for ifname, interface in ns.interfaces.items():
            if not interface.up or interface.kind == "loopback":
                continue
            for cidr in interface.addresses:
                network = ipaddress.ip_interface(cidr).network
                if network.prefixlen < 32:
                    routes.append(RouteStatus(str(network), (f"dev {ifname}",)))
        for route in ns.routes.values():
            routes.append(RouteStatus(route.destination, tuple(hop.describe() for hop in route.nexthops)))
        return routes


def _qdiscs(interface: Interface) -> tuple[QdiscStatus, ...]:
    result = []
    if interface.htb is not None:
        result.append(QdiscStatus("htb", "1:", "root", interface.htb.rate_bps))
    leaf = interface.leaf
    if leaf is not None:
        if isinstance(leaf, AddNetem):
            result.append(QdiscStatus("netem", "10:", leaf.parent.value, None, _netem_detail(leaf)))
        else:
            result.append(QdiscStatus("pfifo", "10:", leaf.parent.value, None, f"limit {leaf.limit_packets}"))
    if interface.ack_leaf is not None:
        result.append(QdiscStatus("netem", "20:", interface.ack_leaf.parent.value, None,
                                  _netem_detail(interface.ack_leaf)))
    if not result:
        result.append(QdiscStatus("noqueue", "0:", "root"))  # what the kernel gives a new interface
    return tuple(result)


def _netem_detail(netem: AddNetem) -> str:
    return (f"delay {int(netem.delay_us):g}us jitter {int(netem.jitter_us):g}us "
            f"loss {netem.loss_pct:.3g}% limit {netem.limit_packets}")


class KernelNetlink:
    """The live-change calls of `genie.testbed.netlink` that `genie.faults.live.LiveTestbed` makes, on a
    `KernelModel` (pass it as the live testbed's `netlink`). `fail_at`: the call number (1-based) that fails
    with an OSError, as the kernel may refuse a change part-way; None: none fails."""

    def __init__(self, kernel: KernelModel, *, fail_at: int | None = None) -> None:
        self.kernel, self.fail_at, self.calls = kernel, fail_at, 0

    def _call(self) -> None:
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise _error(errno.EBUSY, f"fake failure of live change {self.calls}")

    def change_htb_class(self, step: AddHtb) -> None:
        self._call()
        interface = self.kernel.interface(step.netns, step.ifname)
        if interface.htb is None:
            raise _error(errno.ENOENT, f"{step.netns}: {step.ifname} has no HTB class")
        interface.htb = step

    def write_sysctl(self, netns: str, key: str, value: str, *, if_present: bool = False) -> None:
        self._call()  # the model kernel has every key, so `if_present` never skips
        self.kernel.apply(SetSysctl(netns, key, value))

    def replace_egress_qdiscs(self, netns: str, ifname: str, steps: list[PlanStep]) -> None:
        self._call()
        interface = self.kernel.interface(netns, ifname)
        interface.htb = interface.leaf = interface.ack_leaf = None
        for step in steps:
            self.kernel.apply(step)
