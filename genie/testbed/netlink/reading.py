"""Reading the kernel's state in testbed namespaces through pyroute2: link counters, a namespace's interfaces,
qdiscs and routes, the next hop the kernel picks for one TCP flow (:class:`FlowRoutes`) and the established TCP
connections' windows and RTTs (:class:`TcpDiag`). Nothing here changes anything.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from typing import Any, Self

from pyroute2 import IPRoute
from pyroute2.netlink import NETLINK_SOCK_DIAG, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR
from pyroute2.netlink.diag import SOCK_DIAG_BY_FAMILY, SS_ESTABLISHED, inet_diag_msg, inet_diag_req
from pyroute2.netlink.rtnl import RTM_GETROUTE, RTM_NEWROUTE
from pyroute2.netlink.rtnl.rtmsg import rtmsg
from pyroute2.netlink.rtnl.tcmsg.common import tick_in_usec

from genie.core.errors import EnvironmentProblem
from genie.core.flowpath import FlowTuple
from genie.core.testbed import TestbedInfo
from genie.testbed.namespaces import namespace_pids, netns_exists
from genie.testbed.netlink.backend import HTB_CLASS, TC_H_ROOT, _configure_pyroute2, run_in_netns
from genie.testbed.observed import (InterfaceStatus, LinkCounters, NamespaceStatus, QdiscStatus, RouteStatus,
                                   TcpConnectionInfo)


def link_counters(info: TestbedInfo) -> list[LinkCounters]:
    """Byte, packet and drop counters of every link end of a live testbed, in `info.link_ends` order."""
    _configure_pyroute2()
    result = []
    sockets: dict[str, IPRoute] = {}
    try:
        for end in info.link_ends:
            name = end.netns or ""
            if name not in sockets:
                sockets[name] = IPRoute(netns=name, flags=0) if name else IPRoute()
            ipr = sockets[name]
            found = ipr.link_lookup(ifname=end.ifname)
            if not found:
                raise EnvironmentProblem(f"testbed {info.name}: {name}:{end.ifname} is gone")
            link = ipr.get_links(found[0])[0]
            stats = link.get_attr("IFLA_STATS64") or link.get_attr("IFLA_STATS")
            qdisc_drops = sum(_qdisc_drops(q) for q in ipr.get_qdiscs(index=found[0]) if q["parent"] == TC_H_ROOT)
            result.append(LinkCounters(end, stats["tx_bytes"], stats["tx_packets"], stats["tx_dropped"],
                                       stats["rx_bytes"], stats["rx_packets"], stats["rx_dropped"], qdisc_drops))
    finally:
        for ipr in sockets.values():
            ipr.close()
    return result


def _qdisc_drops(msg: Any) -> int:
    stats = msg.get_attr("TCA_STATS2")
    basic = stats.get_attr("TCA_STATS_QUEUE") if stats is not None else None
    if basic is not None:
        return int(basic["drops"])
    legacy = msg.get_attr("TCA_STATS")
    return int(legacy["drops"]) if legacy is not None else 0


def inspect_namespace(name: str) -> NamespaceStatus:
    """Interfaces (state, MTU, addresses, bridge, qdiscs with rates), routes and processes of a namespace."""
    if not netns_exists(name):
        return NamespaceStatus(name, present=False)
    _configure_pyroute2()
    with IPRoute(netns=name, flags=0) as ipr:
        links = list(ipr.get_links())
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in links}
        addresses: dict[int, list[str]] = {}
        for addr in ipr.get_addr(family=2):
            addresses.setdefault(addr["index"], []).append(f"{addr.get_attr('IFA_ADDRESS')}/{addr['prefixlen']}")
        interfaces = []
        for link in links:
            index = link["index"]
            linkinfo = link.get_attr("IFLA_LINKINFO")
            kind = linkinfo.get_attr("IFLA_INFO_KIND") if linkinfo is not None else None
            interfaces.append(InterfaceStatus(
                ifname=names[index], kind=kind or ("loopback" if names[index] == "lo" else "other"),
                up=bool(link["flags"] & 1), mtu_bytes=int(link.get_attr("IFLA_MTU")),
                addresses=tuple(addresses.get(index, ())), master=names.get(link.get_attr("IFLA_MASTER")),
                qdiscs=_qdiscs(ipr, index)))
        routes = [_route_status(route, names) for route in ipr.get_routes(family=2, table=254)]
    return NamespaceStatus(name, True, tuple(interfaces), tuple(routes), tuple(namespace_pids(name)))


def _handle(value: int) -> str:
    return "root" if value == TC_H_ROOT else f"{value >> 16:x}:{value & 0xFFFF or ''}"


def _qdiscs(ipr: IPRoute, index: int) -> tuple[QdiscStatus, ...]:
    rates = {}
    for cls in ipr.get_classes(index=index):
        options = cls.get_attr("TCA_OPTIONS")
        if cls.get_attr("TCA_KIND") == "htb" and options is not None:
            params = options.get_attr("TCA_HTB_PARMS")
            rate64 = options.get_attr("TCA_HTB_RATE64")
            if cls["handle"] == HTB_CLASS:  # the rate class 1:1, not the ACK lane
                rates[cls["handle"] & 0xFFFF0000] = 8 * int(rate64 or params["rate"])  # keyed by qdisc handle
    result = []
    for q in ipr.get_qdiscs(index=index):
        kind = q.get_attr("TCA_KIND")
        detail = ""
        options = q.get_attr("TCA_OPTIONS")
        if kind == "netem" and options is not None:
            detail = (f"delay {options['delay'] / tick_in_usec:g}us jitter {options['jitter'] / tick_in_usec:g}us "
                      f"loss {100 * options['loss'] / (2**32 - 1):.3g}% limit {options['limit']}")
        elif kind == "pfifo" and options is not None:
            detail = f"limit {options['limit']}"
        result.append(QdiscStatus(kind, _handle(q["handle"]), _handle(q["parent"]),
                                  rates.get(q["handle"]) if kind == "htb" else None, detail))
    return tuple(result)


def _route_status(route: Any, names: dict[int, str]) -> RouteStatus:
    dst = route.get_attr("RTA_DST")
    destination = f"{dst}/{route['dst_len']}" if dst else "default"
    hops: Iterable[Any] = route.get_attr("RTA_MULTIPATH") or [route]
    nexthops = []
    for hop in hops:
        gateway = hop.get_attr("RTA_GATEWAY")
        oif = hop.get("oif") if "oif" in hop else hop.get_attr("RTA_OIF")
        dev = names.get(oif, str(oif))
        nexthops.append(f"via {gateway} dev {dev}" if gateway else f"dev {dev}")
    return RouteStatus(destination, tuple(nexthops))


# ---- live changes of a running testbed (fault injection, genie.faults) --------------------------------------
class _flow_rtmsg(rtmsg):
    """pyroute2's rtmsg without the flow attributes ``ip route get ... ipproto tcp sport S dport D`` sends
    (Linux >= 4.17): the ECMP hash of the testbed's ``fib_multipath_hash_policy=3`` reads them."""

    nla_map = rtmsg.nla_map + (("RTA_PAD", "hex"), ("RTA_UID", "uint32"), ("RTA_TTL_PROPAGATE", "uint8"),
                               ("RTA_IP_PROTO", "uint8"), ("RTA_SPORT", "be16"), ("RTA_DPORT", "be16"))
    # pyroute2 compiles a class's attribute table once, into class attributes a subclass would inherit: once
    # rtmsg has been used (any route added in this process) this class would encode with rtmsg's table and
    # silently drop the three attributes above. Its own flag makes it compile its own table.
    _nlmsg_base__compiled_nla = False


class _NamespaceSockets:
    """Netlink sockets of one protocol, one per testbed namespace, each opened inside its namespace (a socket
    stays in the namespace it was made in) by the first request there and kept until :meth:`close`; requests
    numbered in turn."""

    protocol = socket.NETLINK_ROUTE

    def __init__(self) -> None:
        self._open: dict[str, socket.socket] = {}
        self._sequence = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for sock in self._open.values():
            sock.close()
        self._open.clear()

    def _socket(self, name: str) -> socket.socket:
        sock = self._open.get(name)
        if sock is None:
            sock = self._open[name] = run_in_netns(
                name, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, self.protocol))
            sock.settimeout(5.0)  # the kernel always answers; a read never waits for ever regardless
        return sock

    def _next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence


class FlowRoutes(_NamespaceSockets):
    """Which interface a namespace's kernel sends one TCP flow out of, as ``ip route get DST from SRC [iif IIF]
    ipproto tcp sport S dport D`` asks it: the next hop its ECMP hash picks for exactly that 5-tuple. One
    netlink socket per namespace, opened inside it, with the namespace's interface names read there."""

    def __init__(self) -> None:
        super().__init__()
        self._interfaces: dict[str, tuple[dict[str, int], dict[int, str]]] = {}

    def _namespace(self, name: str) -> tuple[socket.socket, dict[str, int], dict[int, str]]:
        interfaces = self._interfaces.get(name)
        if interfaces is None:
            pairs = run_in_netns(name, socket.if_nameindex)
            interfaces = self._interfaces[name] = ({n: i for i, n in pairs}, {i: n for i, n in pairs})
        return self._socket(name), *interfaces

    def output_interface(self, netns_name: str, flow: FlowTuple, iif: str | None = None) -> str | None:
        """The interface `flow` leaves namespace `netns_name` by (arriving on `iif`; None: sent from there), or
        None when the kernel has no route for it."""
        sock, index, names = self._namespace(netns_name)
        sequence = self._next_sequence()
        msg = _flow_rtmsg()
        msg["header"]["type"] = RTM_GETROUTE
        msg["header"]["flags"] = NLM_F_REQUEST
        msg["header"]["sequence_number"] = sequence
        msg["family"] = socket.AF_INET
        msg["dst_len"] = msg["src_len"] = 32
        attrs: list[tuple[str, Any]] = [("RTA_DST", flow.dst_ip), ("RTA_SRC", flow.src_ip),
                                        ("RTA_IP_PROTO", socket.IPPROTO_TCP), ("RTA_SPORT", flow.src_port),
                                        ("RTA_DPORT", flow.dst_port)]
        if iif is not None:
            attrs.append(("RTA_IIF", index[iif]))
        msg["attrs"] = attrs
        if not msg.valid_nla("RTA_SPORT"):  # see _flow_rtmsg: never ask without the ports
            raise RuntimeError("pyroute2's route message lost the flow attributes")
        msg.encode()
        sock.send(msg.data)
        reply = _flow_rtmsg(sock.recv(65536))
        reply.decode()
        if reply["header"]["type"] != RTM_NEWROUTE:
            return None
        oif = reply.get_attr("RTA_OIF")
        return names.get(oif) if oif is not None else None


_INET_DIAG_INFO = 2  # the tcp_info attribute of a sock_diag answer (linux/inet_diag.h)


class TcpDiag(_NamespaceSockets):
    """The established IPv4 TCP connections of testbed namespaces, with their congestion window and smoothed RTT:
    what ``ss -tin`` prints, asked of the kernel over sock_diag (one socket per namespace, kept) without a
    process per read."""

    protocol = NETLINK_SOCK_DIAG

    def established(self, netns_name: str) -> list[TcpConnectionInfo]:
        """Every established IPv4 TCP connection of namespace `netns_name` (a testbed carries IPv4 only)."""
        sock = self._socket(netns_name)
        sequence = self._next_sequence()
        req = inet_diag_req()
        req["header"]["type"] = SOCK_DIAG_BY_FAMILY
        req["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
        req["header"]["sequence_number"] = sequence
        req["sdiag_family"] = socket.AF_INET
        req["sdiag_protocol"] = socket.IPPROTO_TCP
        req["idiag_states"] = 1 << SS_ESTABLISHED
        req["idiag_ext"] = 1 << (_INET_DIAG_INFO - 1)
        for key in ("idiag_sport", "idiag_dport", "idiag_src", "idiag_dst", "idiag_if", "idiag_cookie"):
            req[key] = 0
        req.encode()
        sock.send(req.data)
        found: list[TcpConnectionInfo] = []
        while True:
            data = sock.recv(1 << 16)
            offset = 0
            while offset + 16 <= len(data):
                length, kind, _flags, answer_to = struct.unpack_from("=IHHI", data, offset)
                if length < 16:
                    raise OSError(f"{netns_name}: a malformed sock_diag answer")
                if answer_to == sequence:
                    if kind == NLMSG_DONE:
                        return found
                    if kind == NLMSG_ERROR:
                        code = struct.unpack_from("=i", data, offset + 16)[0]
                        raise OSError(-code, f"{netns_name}: sock_diag refused the request")
                    msg = inet_diag_msg(data[offset:offset + length])
                    msg.decode()
                    info = msg.get_attr("INET_DIAG_INFO")
                    if info is not None:
                        found.append(TcpConnectionInfo(int(info["tcpi_snd_cwnd"]), int(info["tcpi_rtt"])))
                offset += (length + 3) & ~3
