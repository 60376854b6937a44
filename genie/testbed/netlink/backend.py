"""The pyroute2 backend: steps applied and undone, namespaces, sysctls, live changes (writes; what reads the
kernel's state is :mod:`genie.testbed.netlink.reading`).

Every netlink socket is opened *inside* a testbed namespace (``IPRoute(netns=..., flags=0)``: never creating a
namespace by accident) — nothing here changes the root namespace. Sysctls are written from a short-lived thread
that has entered the namespace with setns(2) (net sysctls follow the calling thread's namespace).
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pyroute2 import IPRoute, config, netns
from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_NEWTFILTER
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from genie.core.errors import EnvironmentProblem
from genie.testbed.layout import NETNS_DIR, NETNS_PREFIX, probe_netns_name
from genie.testbed.namespaces import netns_exists, netns_path
from genie.testbed.lifecycle import process_start_ticks, signals_deferred
from genie.testbed.steps import (AddAddress, AddBridge, AddHtb, AddNetem, AddPfifo, AddRoute, CreateNetns,
                                 CreateVethPair, EnslaveLink, PlanStep, QdiscParent, SetLinkUp, SetSysctl)

HTB_ROOT = 0x10000  # 1:
HTB_CLASS = 0x10001  # 1:1
ACK_CLASS = 0x10002  # 1:2, the ACK lane (genie.testbed.shaping)
LEAF_HANDLE = 0x100000  # 10:
ACK_LEAF_HANDLE = 0x200000  # 20:, under the ACK lane
# The ACK lane's u32 filters, one per TCP header length (data offset 5-15 words): a segment is a pure ACK when
# its IPv4 total length is exactly the two headers (20 + 4 * data offset: no payload). All keys of a filter
# must match: a 20-byte IPv4 header (IHL, the low nibble of byte 0), that total length (bytes 2-3), protocol
# TCP (byte 9), that data offset (high nibble of byte 32), and of the TCP flags URG ACK PSH RST SYN FIN (byte
# 33) only ACK. pyroute2 reads "value/mask+offset" byte by byte from the first non-zero byte of the mask and
# packs the mask's non-zero bytes next to each other, so a mask with a zero byte inside would shift the rest:
# one key per field (pyroute2 merges neighbouring bytes into one kernel key).
# The eleven filters sit in a u32 table of their own (ACK_TABLE), behind one gate filter in the root table
# that links to it only packets whose IPv4 total length is under 128 bytes (a pure ACK is 40-80): a data
# segment of 128 bytes or more is classified by one key instead of eleven filters, at every shaped egress
# it crosses (measured: u32_classify 0.32-0.46 -> 0.13-0.30 us of CPU per 1 KiB message on star-8;
# benchmarks/README.md, "The emulated star's own packet path"). A packet the gate lets in and no filter of
# the table takes is given the data class by the gate (its classid, 1:1, the default class anyway).
PURE_ACK_FILTER_KEYS = tuple(("0x5/0xf+0", f"0x{20 + 4 * words:04x}/0xffff+2", "0x06/0xff+9",
                              f"0x{words << 4:02x}/0xf0+32", "0x10/0x3f+33") for words in range(5, 16))
ACK_GATE_KEYS = ("0x0000/0xff80+2",)  # IPv4 total length < 128 bytes
ACK_TABLE = 0x00200000  # u32 hash table 2: (its 12-bit id in the handle's top bits), one bucket
ACK_FILTER_PRIO = 1
DATA_PRIO, ACK_PRIO = 1, 0  # HTB serves a lower prio first
ETH_P_IP = 0x0800
TC_H_ROOT = 0xFFFFFFFF
_GONE = {errno.ENOENT, errno.ENODEV, errno.ESRCH, errno.EADDRNOTAVAIL, errno.EINVAL}
_T = TypeVar("_T")


def _configure_pyroute2() -> None:
    """pyroute2 forks a helper to enter a namespace. In its default 'fork' mode a KeyboardInterrupt (Ctrl-C
    reaches the whole process group) escapes the helper, which then runs on in *our* code with copies of our
    netlink sockets. The 'mp' mode runs the helper under multiprocessing, which always ends the child."""
    config.child_process_mode = "mp"


def list_genie_namespaces() -> list[str]:
    """Names of every namespace carrying genie's prefix (``genie-``), sorted."""
    return sorted(name for name in netns.listnetns(NETNS_DIR) if name.startswith(NETNS_PREFIX))


def remove_namespace(name: str) -> bool:
    """Unmount and delete the named namespace; False if it did not exist."""
    if not netns_exists(name):
        return False
    netns.remove(name)
    return True


def run_in_netns(name: str, fn: Callable[[], _T]) -> _T:
    """Run `fn` in a fresh thread that has entered namespace `name` (the caller's thread never moves)."""
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            fd = os.open(netns_path(name), os.O_RDONLY)
            try:
                netns.setns(fd)
            finally:
                os.close(fd)
            outcome["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=body, name=f"genie-netns-{name}")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


def write_sysctl(name: str, key: str, value: str, *, if_present: bool = False) -> None:
    """Set sysctl `key` in namespace `name`; with `if_present` a key this kernel lacks is skipped."""
    path = "/proc/sys/" + key.replace(".", "/")

    def write() -> None:
        try:
            with open(path, "w") as handle:
                handle.write(value)
        except FileNotFoundError:
            if if_present:
                return
            raise EnvironmentProblem(f"this kernel has no sysctl {key} (genie's testbeds need it; "
                                     f"docs/testbed.md)") from None

    run_in_netns(name, write)


class NetlinkBackend:
    """Applies and undoes plan steps with pyroute2. Use as a context manager (closes its sockets)."""

    def __init__(self) -> None:
        _configure_pyroute2()
        self._sockets: dict[str, IPRoute] = {}

    def __enter__(self) -> NetlinkBackend:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for ipr in self._sockets.values():
            ipr.close()
        self._sockets.clear()

    def _ipr(self, name: str) -> IPRoute:
        if name not in self._sockets:
            _check_testbed_namespace(name)
            if not netns_exists(name):
                raise FileNotFoundError(f"namespace {name} does not exist")
            self._sockets[name] = IPRoute(netns=name, flags=0)
        return self._sockets[name]

    def _drop(self, name: str) -> None:
        ipr = self._sockets.pop(name, None)
        if ipr is not None:
            ipr.close()

    def _index(self, name: str, ifname: str) -> int:
        found = self._ipr(name).link_lookup(ifname=ifname)
        if not found:
            raise FileNotFoundError(f"{name}: no interface {ifname}")
        return int(found[0])

    def apply(self, step: PlanStep) -> None:
        """Apply one step atomically: if it fails or is interrupted half-way, what it made is removed."""
        if isinstance(step, CreateNetns) and netns_exists(step.netns):
            raise FileExistsError(f"namespace {step.netns} already exists")  # someone else's: never undo it
        try:
            self._apply(step)
        except FileExistsError:
            if isinstance(step, CreateNetns):
                raise  # created by someone else in the meantime
            self._undo_partial(step)
            raise
        except BaseException:
            self._undo_partial(step)
            raise

    def _sysctl(self, name: str, key: str, value: str, if_present: bool = False) -> None:
        write_sysctl(name, key, value, if_present=if_present)

    def _undo_partial(self, step: PlanStep) -> None:
        with signals_deferred():
            try:
                self.undo(step)
            except Exception:  # the original error is the one to report
                pass

    def _apply(self, step: PlanStep) -> None:
        match step:
            case CreateNetns(netns=name):
                netns.create(name)
            case SetSysctl(netns=name, key=key, value=value):
                self._sysctl(name, key, value, step.if_present)
            case SetLinkUp(netns=name, ifname=ifname):
                self._ipr(name).link("set", index=self._index(name, ifname), state="up")
            case AddBridge(netns=name, ifname=ifname):
                self._ipr(name).link("add", ifname=ifname, kind="bridge")
            case CreateVethPair():
                peer: dict[str, Any] = {"ifname": step.ifname_b, "net_ns_fd": step.netns_b}
                mac: dict[str, Any] = {}
                if step.mac_a and step.mac_b:
                    peer["address"] = step.mac_b
                    mac["address"] = step.mac_a
                self._ipr(step.netns_a).link("add", ifname=step.ifname_a, kind="veth", peer=peer, **mac)
                for name, ifname in ((step.netns_a, step.ifname_a), (step.netns_b, step.ifname_b)):
                    self._ipr(name).link("set", index=self._index(name, ifname), mtu=step.mtu_bytes)
            case EnslaveLink(netns=name, ifname=ifname, bridge=bridge):
                self._ipr(name).link("set", index=self._index(name, ifname), master=self._index(name, bridge))
            case AddAddress(netns=name, ifname=ifname):
                self._ipr(name).addr("add", index=self._index(name, ifname), address=step.address,
                                     prefixlen=step.prefix_len)
            case AddRoute(netns=name):
                self._ipr(name).route("add", **self._route_spec(step))
            case AddHtb(netns=name, ifname=ifname):
                self._add_htb(self._ipr(name), self._index(name, ifname), step)
            case AddNetem(netns=name, ifname=ifname):
                wire = {"rate": f"{step.rate_bps}bit"} if step.rate_bps else {}
                self._ipr(name).tc("add", "netem", index=self._index(name, ifname), handle=_leaf_handle(step.parent),
                                   parent=_parent(step.parent), delay=int(step.delay_us),
                                   jitter=int(step.jitter_us), loss=step.loss_pct, limit=step.limit_packets,
                                   **wire)
            case AddPfifo(netns=name, ifname=ifname):
                self._ipr(name).tc("add", "pfifo", index=self._index(name, ifname), handle=LEAF_HANDLE,
                                   parent=_parent(step.parent), limit=step.limit_packets)
            case _:
                raise TypeError(f"unknown step {step!r}")

    def undo(self, step: PlanStep) -> None:
        """Revert `step`; objects (or whole namespaces) that are already gone count as undone."""
        if isinstance(step, CreateNetns):
            self._drop(step.netns)
            remove_namespace(step.netns)
            return
        if isinstance(step, SetSysctl):
            return  # a namespace's sysctls vanish with it
        try:
            self._undo_in_namespace(step)
        except FileNotFoundError:
            return
        except NetlinkError as exc:
            if exc.code not in _GONE:
                raise

    def _undo_in_namespace(self, step: PlanStep) -> None:
        match step:
            case SetLinkUp(netns=name, ifname=ifname):
                self._ipr(name).link("set", index=self._index(name, ifname), state="down")
            case EnslaveLink(netns=name, ifname=ifname):
                self._ipr(name).link("set", index=self._index(name, ifname), master=0)
            case AddBridge(netns=name, ifname=ifname):
                self._ipr(name).link("del", index=self._index(name, ifname))
            case CreateVethPair():
                for name, ifname in ((step.netns_a, step.ifname_a), (step.netns_b, step.ifname_b)):
                    try:
                        self._ipr(name).link("del", index=self._index(name, ifname))
                        return  # deleting one end deletes the pair
                    except FileNotFoundError:
                        continue
            case AddAddress(netns=name, ifname=ifname):
                self._ipr(name).addr("del", index=self._index(name, ifname), address=step.address,
                                     prefixlen=step.prefix_len)
            case AddRoute(netns=name):
                self._ipr(name).route("del", dst=step.destination)
            case AddHtb(netns=name, ifname=ifname):
                self._ipr(name).tc("del", index=self._index(name, ifname), parent=TC_H_ROOT)
            case AddNetem(netns=name, ifname=ifname) | AddPfifo(netns=name, ifname=ifname):
                self._ipr(name).tc("del", index=self._index(name, ifname), handle=_leaf_handle(step.parent),
                                   parent=_parent(step.parent))
            case _:
                raise TypeError(f"unknown step {step!r}")

    def _route_spec(self, step: AddRoute) -> dict[str, Any]:
        hops = [{"oif": self._index(step.netns, hop.ifname), **({"gateway": hop.gateway} if hop.gateway else {})}
                for hop in step.nexthops]
        spec: dict[str, Any] = {"dst": step.destination}
        if step.source:
            spec["prefsrc"] = step.source
        if len(hops) == 1:
            spec.update(hops[0])
        else:
            spec["multipath"] = hops
        return spec

    @staticmethod
    def _add_htb(ipr: IPRoute, index: int, step: AddHtb) -> None:
        ipr.tc("add", "htb", index=index, handle=HTB_ROOT, default=HTB_CLASS & 0xFFFF)
        ipr.tc("add-class", "htb", index=index, handle=HTB_CLASS, parent=HTB_ROOT, **_htb_class_args(step))
        ipr.tc("add-class", "htb", index=index, handle=ACK_CLASS, parent=HTB_ROOT, **_ack_class_args(step))
        _add_u32(ipr, index, ACK_TABLE, [("TCA_U32_DIVISOR", 1)])
        for keys in PURE_ACK_FILTER_KEYS:
            _add_u32(ipr, index, 0, [("TCA_U32_HASH", ACK_TABLE), ("TCA_U32_CLASSID", ACK_CLASS),
                                     ("TCA_U32_SEL", {"keys": list(keys)})])
        _add_u32(ipr, index, 0, [("TCA_U32_LINK", struct.pack("=I", ACK_TABLE)), ("TCA_U32_CLASSID", HTB_CLASS),
                                 ("TCA_U32_SEL", {"keys": list(ACK_GATE_KEYS)})])


def _add_u32(ipr: IPRoute, index: int, handle: int, options: list[tuple[str, Any]]) -> None:
    """Add one u32 filter (or, with TCA_U32_DIVISOR, a u32 table `handle`) under the HTB root at the ACK lane's
    prio. Built as a message: pyroute2's ``tc("add-filter", "u32", ...)`` cannot say which table a filter goes
    in (TCA_U32_HASH), link one to a table (TCA_U32_LINK) or make a table (TCA_U32_DIVISOR)."""
    msg = tcmsg()
    msg["index"], msg["handle"], msg["parent"] = index, handle, HTB_ROOT
    msg["info"] = (ACK_FILTER_PRIO << 16) | socket.htons(ETH_P_IP)
    msg["attrs"] = [["TCA_KIND", "u32"], ["TCA_OPTIONS", {"attrs": [list(option) for option in options]}]]
    msg["header"]["type"] = RTM_NEWTFILTER
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    ipr.nlm_request_batch([msg])


HOST_STEP_TYPES = (AddHtb, AddNetem, AddPfifo, SetSysctl)


class HostNetlinkBackend(NetlinkBackend):
    """The shaping steps of one node applied to the network namespace this process runs in: a real host
    standing in for a testbed node (a lab VM; ``genie lab shape``). The namespace a step names is only its
    label. Refuses every other kind of step: a host's addresses and routes are not genie's to change."""

    def _ipr(self, name: str) -> IPRoute:
        if "" not in self._sockets:
            self._sockets[""] = IPRoute()
        return self._sockets[""]

    def _sysctl(self, name: str, key: str, value: str, if_present: bool = False) -> None:
        try:
            with open("/proc/sys/" + key.replace(".", "/"), "w") as handle:
                handle.write(value)
        except FileNotFoundError:
            if not if_present:
                raise

    def apply(self, step: PlanStep) -> None:
        if not isinstance(step, HOST_STEP_TYPES):
            raise TypeError(f"not a step a host applies to itself: {step.describe()}")
        super().apply(step)

    def undo(self, step: PlanStep) -> None:
        if isinstance(step, SetSysctl):
            return  # kept (the host's own sysctl): the next `genie lab shape` sets it again
        super().undo(step)


def local_addresses() -> dict[str, str]:
    """IPv4 address -> interface name, in the network namespace this process runs in."""
    _configure_pyroute2()
    with IPRoute() as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        return {addr.get_attr("IFA_ADDRESS"): names[addr["index"]] for addr in ipr.get_addr(family=2)}


def clear_local_root_qdisc(ifname: str) -> bool:
    """Remove the root qdisc (and all under it) of `ifname` in this process's namespace; False if none."""
    _configure_pyroute2()
    with signals_deferred(), IPRoute() as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise EnvironmentProblem(f"no interface {ifname}")
        if not any(q["parent"] == TC_H_ROOT and q.get_attr("TCA_KIND") != "noqueue"
                   for q in ipr.get_qdiscs(index=found[0])):
            return False
        try:
            ipr.tc("del", index=found[0], parent=TC_H_ROOT)
        except NetlinkError as exc:
            if exc.code not in _GONE:
                raise
            return False
        return True


def _htb_class_args(step: AddHtb) -> dict[str, int]:
    return {"rate": step.rate_bps // 8, "burst": step.burst_bytes, "ceil": step.ceil_bps // 8,
            "cburst": step.cburst_bytes, "quantum": step.quantum_bytes, "prio": DATA_PRIO}


def _ack_class_args(step: AddHtb) -> dict[str, int]:
    return {"rate": step.ceil_bps // 8, "burst": step.cburst_bytes, "ceil": step.ceil_bps // 8,
            "cburst": step.cburst_bytes, "quantum": step.quantum_bytes, "prio": ACK_PRIO}


def _parent(parent: QdiscParent) -> int:
    return {QdiscParent.HTB_CLASS: HTB_CLASS, QdiscParent.ACK_CLASS: ACK_CLASS}.get(parent, TC_H_ROOT)


def _leaf_handle(parent: QdiscParent) -> int:
    return ACK_LEAF_HANDLE if parent is QdiscParent.ACK_CLASS else LEAF_HANDLE


@functools.cache
def probe_netem() -> bool:
    """Can this kernel add a netem qdisc? Tried once per process on ``lo`` of a scratch namespace
    (``genie-probe-<pid>-<start ticks>``, `genie.testbed.layout.probe_netns_name`: `down --all` leaves it alone
    while this process runs), which is removed afterwards."""
    _configure_pyroute2()
    scratch = probe_netns_name(os.getpid(), process_start_ticks(os.getpid()))
    remove_namespace(scratch)
    netns.create(scratch)
    try:
        with IPRoute(netns=scratch, flags=0) as ipr:
            lo = ipr.link_lookup(ifname="lo")[0]
            try:
                ipr.tc("add", "netem", index=lo, handle=LEAF_HANDLE, delay=1000)
            except NetlinkError as exc:
                if exc.code == errno.ENOENT:
                    return False
                raise EnvironmentProblem(f"probing for sch_netem failed: {exc}") from exc
            return True
    finally:
        remove_namespace(scratch)


def _check_testbed_namespace(name: object) -> None:
    """The live changes act inside a testbed namespace only: ``IPRoute(netns=None)`` is the root namespace."""
    if not isinstance(name, str) or not name.startswith(NETNS_PREFIX):
        raise EnvironmentProblem(f"refusing to change a link outside genie's namespaces: {name!r}")


def set_link_state(name: str, ifname: str, up: bool) -> None:
    """Set interface `ifname` of testbed namespace `name` administratively up or down."""
    _check_testbed_namespace(name)
    _configure_pyroute2()
    with signals_deferred(), IPRoute(netns=name, flags=0) as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise EnvironmentProblem(f"{name}: no interface {ifname}")
        ipr.link("set", index=found[0], state="up" if up else "down")


def change_htb_class(step: AddHtb) -> None:
    """Change the HTB class 1:1 (and the ACK lane 1:2) on the step's interface in place to the step's rates
    (queued packets are kept)."""
    name, ifname = step.netns, step.ifname
    _check_testbed_namespace(name)
    _configure_pyroute2()
    with signals_deferred(), IPRoute(netns=name, flags=0) as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise EnvironmentProblem(f"{name}: no interface {ifname}")
        ipr.tc("change-class", "htb", index=found[0], handle=HTB_CLASS, parent=HTB_ROOT, **_htb_class_args(step))
        try:
            ipr.tc("change-class", "htb", index=found[0], handle=ACK_CLASS, parent=HTB_ROOT, **_ack_class_args(step))
        except NetlinkError as exc:
            if exc.code != errno.ENOENT:  # a testbed of a genie before the ACK lane has none
                raise


def replace_egress_qdiscs(name: str, ifname: str, steps: list[PlanStep]) -> None:
    """Remove the root qdisc of `ifname` (and everything under it), then apply `steps` (the qdisc steps of a
    new shape, `genie.testbed.shaping.shaping_steps`)."""
    _configure_pyroute2()
    with signals_deferred(), NetlinkBackend() as backend:
        ipr = backend._ipr(name)
        index = backend._index(name, ifname)
        if any(q["parent"] == TC_H_ROOT for q in ipr.get_qdiscs(index=index)):
            try:
                ipr.tc("del", index=index, parent=TC_H_ROOT)
            except NetlinkError as exc:
                if exc.code not in _GONE:
                    raise
        for step in steps:
            backend.apply(step)


def add_routes(steps: Iterable[AddRoute]) -> None:
    """Add routes again (those a link taken down removed); routes still present are left alone."""
    _configure_pyroute2()
    with signals_deferred(), NetlinkBackend() as backend:
        for step in steps:
            try:
                backend._ipr(step.netns).route("add", **backend._route_spec(step))
            except NetlinkError as exc:
                if exc.code != errno.EEXIST:
                    raise
