"""Topology -> the plan of a testbed: an ordered list of steps, plus the TestbedInfo its users will see. Pure.

Order of the plan:
1. per node (hosts, then switches): its namespace, loopback up, IPv6 off (keeps link counters free of
   neighbour-discovery chatter), and for routers / forwarding hosts ``ip_forward`` (plus L4 ECMP hashing where a
   node has multipath routes);
2. per bridge switch: ``br0`` and up;
3. per link: the veth pair, then for each end its bridge port or address, its qdiscs, and up;
4. static routes: every host and router gets a /32 route to every host it is not directly attached to, with
   every equal-cost next hop (ECMP multipath). Hosts' routes carry their rank address as preferred source. No
   default routes;
5. where links have delays: larger TCP buffer maxima in hosts whose longest round trip needs them;
6. with the USERSPACE shaper: per receiving namespace its link emulator, then its NFQUEUE rules
   (`genie.testbed.userspace`; veths then get fixed MACs, by which emulators tell senders apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import dataclasses

from genie.core.dilation import NO_DILATION, TimeDilation
from genie.core.errors import InputError
from genie.core.testbed import HostEndpoint, LinkEnd, LinkModel, TestbedInfo
from genie.core.topology import Link, Switch, SwitchKind, Topology
from genie.testbed.layout import (BRIDGE_IFNAME, NETNS_PREFIX, EndLayout, Segment, SegmentKind, TestbedLayout,
                                  check_testbed_name, plan_layout)
from genie.testbed.shaping import check_delay_emulation, default_link_model, shaper_summary, shaping_steps
from genie.testbed.steps import (RTO_MIN_US, AddAddress, AddBridge, AddRoute, CreateNetns, CreateVethPair,
                                 EnslaveLink, NextHop, PlanStep, SetLinkUp, SetSysctl, Shaper)
from genie.testbed.userspace import tcp_buffer_steps, userspace_steps, veth_macs
from genie.topology.routing import shortest_paths_next_hops
from genie.topology.validation import validate_topology

IP_FORWARD = "net.ipv4.ip_forward"
#: ECMP nodes hash each packet's 5-tuple (policy 3: the fields below; Linux >= 5.12), as a switch hashes headers.
#: Not policy 1: a forwarded skb that carries the sender's L4 hash (TCP's random, re-drawn ``sk_txhash``: veths
#: keep it across namespaces) is routed by that hash, so neither genie nor the ports tell a connection's path,
#: and a retransmission timeout can move it (measured: paths read with ``ip route get`` missed the bytes).
MULTIPATH_HASH_POLICY = "net.ipv4.fib_multipath_hash_policy"
MULTIPATH_HASH_FIELDS = "net.ipv4.fib_multipath_hash_fields"
FIVE_TUPLE_FIELDS = "0x0037"  # source and destination address, IP protocol, source and destination port
IPV6_OFF = ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6")
#: A bridge's namespace does not pass bridged frames through iptables. Where the br_netfilter module is loaded
#: (Docker loads it) every namespace starts with these at 1, and each frame a switch forwards then runs the
#: IPv4 hooks three times (pre-routing, forward, post-routing) although no genie namespace has rules there:
#: ~7 % of a 1 KiB all-reduce's CPU per rank-step on star-8 (benchmarks/README.md, "Bridged frames and iptables").
#: Without the module the keys do not exist and nothing is set.
BRIDGE_NETFILTER_OFF = ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables",
                        "net.bridge.bridge-nf-call-arptables")
#: Hosts keep a connection's congestion window across idle periods. Linux's default halves it for every
#: retransmission timeout the connection sat idle, down to the initial window (RFC 2861); the RDMA transports of
#: the fabrics genie emulates resume at full rate after any pause. A replay's connections idle through compute
#: and other groups' collectives, a sweep's never do, so with the default every replay op after a pause ran
#: slower than the sweep that calibrates it (measured: the MoE replay's first all-to-all after the DP
#: all-reduces took 420-650 ms where the sweep's took 261 ms, and the whole iteration 6.2 s against 5.8 s).
SLOW_START_AFTER_IDLE = "net.ipv4.tcp_slow_start_after_idle"
#: TCP's minimum retransmission timeout (`genie.testbed.steps.RTO_MIN_US`: set only where the kernel has it).
#: Under time dilation N the links' delays and queues are N x longer in real time, but
#: the 200 ms floor stays real: at 30x one all-to-all run of 1-4 MiB on star-8 --links wire took a spurious
#: timeout (undone by its DSACK) that 6 s did not (benchmarks/README.md, "TCP's minimum RTO under time dilation").
LINUX_RTO_MIN_US = 200_000  # the kernel's TCP_RTO_MIN, the sysctl's default
#: The kernel clamps every RTO at tcp_rto_max_ms (TCP_RTO_MAX, 120 s; the sysctl refuses more), so a larger
#: minimum does nothing: factors above 600 get 120 s.
LINUX_RTO_MAX_US = 120_000_000


@dataclass(frozen=True)
class TestbedPlan:
    info: TestbedInfo
    steps: tuple[PlanStep, ...]


@dataclass(frozen=True)
class _Routing:
    routes: tuple[AddRoute, ...]
    forwarders: frozenset[str]  # nodes that forward: routers and hosts on someone's path
    multipath: frozenset[str]  # nodes with at least one ECMP route


def plan_testbed(topology: Topology, name: str, *, netem_available: bool, shaper: Shaper = Shaper.KERNEL,
                 source: str | None = None, dilation: TimeDilation = NO_DILATION,
                 links: LinkModel | None = None) -> list[PlanStep]:
    """The steps that build `topology` as testbed `name`. Raises InputError before anything when the topology
    cannot be built here (e.g. a link asks for delay and sch_netem is missing)."""
    return list(build_plan(topology, name, netem_available=netem_available, shaper=shaper, source=source,
                           dilation=dilation, links=links).steps)


def build_plan(topology: Topology, name: str, *, netem_available: bool, shaper: Shaper = Shaper.KERNEL,
               source: str | None = None, dilation: TimeDilation = NO_DILATION,
               links: LinkModel | None = None) -> TestbedPlan:
    """The plan of `topology` (the fabric the file states) as testbed `name`. Under `dilation` every step is
    planned from `dilation.real_topology(topology)` (rates / N, delays x N), and the TestbedInfo keeps the
    stated topology and the dilation, so its users report in the stated fabric's time. `links` None: the
    default model for the topology and dilation (`genie.testbed.shaping.default_link_model`)."""
    check_testbed_name(name)
    validate_topology(topology, source=source or "<topology>")
    stated = topology
    links = links or default_link_model(stated, dilation)
    topology = dilation.real_topology(topology)
    for index, link in enumerate(topology.links):
        check_delay_emulation(link.shape, shaper=shaper, netem_available=netem_available,
                              link_path=f"links[{index}]", source=source, links=links)
    layout = plan_layout(topology, name)
    routing = _plan_routes(layout)
    emulation = userspace_steps(layout, links) if shaper is Shaper.USERSPACE else []
    steps: list[PlanStep] = []
    for node in topology.node_names():
        steps.extend(_namespace_steps(layout, node, routing))
    for switch in topology.switches:
        if switch.kind is SwitchKind.BRIDGE:
            netns = layout.netns_of(switch.name)
            steps += [AddBridge(netns, BRIDGE_IFNAME), SetLinkUp(netns, BRIDGE_IFNAME)]
            steps += [SetSysctl(netns, key, "0") for key in BRIDGE_NETFILTER_OFF]
    for index, link in enumerate(topology.links):
        steps.extend(_link_steps(layout, index, link, shaper, links, fixed_macs=bool(emulation)))
    steps.extend(routing.routes)
    steps.extend(host_tcp_steps(layout, dilation))
    steps.extend(emulation)
    info = dataclasses.replace(_testbed_info(layout, steps), topology=stated, dilation=dilation, links=links)
    return TestbedPlan(info, tuple(steps))


def describe_plan(steps: list[PlanStep] | tuple[PlanStep, ...]) -> list[str]:
    """One numbered line per step, as `genie testbed up --dry-run` prints them."""
    width = len(str(len(steps)))
    return [f"{i:>{width}}. {step.describe()}" for i, step in enumerate(steps, 1)]


def _testbed_info(layout: TestbedLayout, steps: list[PlanStep]) -> TestbedInfo:
    hosts = tuple(HostEndpoint(h.name, layout.netns_of(h.name), layout.address_of(h.name))
                  for h in layout.topology.hosts)
    ends = tuple(LinkEnd(e.link_index, e.node, e.peer, e.netns, e.ifname) for e in layout.ends)
    return TestbedInfo(layout.name, f"{NETNS_PREFIX}{layout.name}-", layout.topology, hosts, ends,
                       shaper_summary(steps))


def _namespace_steps(layout: TestbedLayout, node: str, routing: _Routing) -> list[PlanStep]:
    netns = layout.netns_of(node)
    steps: list[PlanStep] = [CreateNetns(netns), SetLinkUp(netns, "lo")]
    steps += [SetSysctl(netns, key, "1") for key in IPV6_OFF]
    if node in routing.forwarders:
        steps.append(SetSysctl(netns, IP_FORWARD, "1"))
    if node in routing.multipath:
        steps += [SetSysctl(netns, MULTIPATH_HASH_FIELDS, FIVE_TUPLE_FIELDS),
                  SetSysctl(netns, MULTIPATH_HASH_POLICY, "3")]
    for segment in layout.segments:
        if segment.kind is SegmentKind.LOOPBACK and segment.members[0].node == node:
            steps.append(AddAddress(netns, "lo", segment.members[0].address, segment.prefix_len))
    return steps


def _link_steps(layout: TestbedLayout, index: int, link: Link, shaper: Shaper, links: LinkModel, *,
                fixed_macs: bool) -> list[PlanStep]:
    end_a, end_b = layout.ends[2 * index], layout.ends[2 * index + 1]
    mac_a, mac_b = veth_macs(index) if fixed_macs else (None, None)
    steps: list[PlanStep] = [CreateVethPair(end_a.netns, end_a.ifname, end_b.netns, end_b.ifname,
                                            link.shape.mtu_bytes, mac_a, mac_b)]
    for end in (end_a, end_b):
        if end.bridge is not None:
            steps.append(EnslaveLink(end.netns, end.ifname, end.bridge))
        else:
            assert end.address is not None and end.prefix_len is not None
            steps.append(AddAddress(end.netns, end.ifname, end.address, end.prefix_len))
        steps.extend(end_shaping_steps(layout, end, shaper, links))
        steps.append(SetLinkUp(end.netns, end.ifname))
    return steps


def end_shaping_steps(layout: TestbedLayout, end: EndLayout, shaper: Shaper,
                      links: LinkModel = LinkModel.BUCKET) -> list[PlanStep]:
    """The qdisc steps on one link end's egress: the link's shape (`genie.testbed.shaping`)."""
    return shaping_steps(end.netns, end.ifname, layout.topology.links[end.link_index].shape, shaper, links)


def node_shaping_steps(layout: TestbedLayout, node: str, shaper: Shaper,
                       links: LinkModel | None = None) -> list[PlanStep]:
    """What the plan shapes in `node`'s namespace, in plan order: the qdiscs of its link ends, its TCP settings
    (`host_tcp_steps`), and with the USERSPACE shaper its link emulator and queue rules. A real host standing
    in for the node (a lab VM) applies exactly these, with its own interface names (`genie.lab.shape`)."""
    netns = layout.netns_of(node)
    links = links or default_link_model(layout.topology, NO_DILATION)
    steps: list[PlanStep] = []
    for end in layout.ends:
        if end.node == node:
            steps.extend(end_shaping_steps(layout, end, shaper, links))
    steps.extend(step for step in host_tcp_steps(layout) if step.netns == netns)
    if shaper is Shaper.USERSPACE:
        steps.extend(step for step in userspace_steps(layout, links) if step.netns == netns)
    return steps


def host_tcp_steps(layout: TestbedLayout, dilation: TimeDilation = NO_DILATION) -> list[PlanStep]:
    """The hosts' TCP settings: no slow start after idle (SLOW_START_AFTER_IDLE) in every host, under
    `dilation` N > 1 the minimum RTO N x the kernel's (`dilated_rto_min_us`), and buffer maxima where a delayed
    path needs them (`genie.testbed.userspace.tcp_buffer_steps`)."""
    rto_min_us = dilated_rto_min_us(dilation)
    steps: list[PlanStep] = []
    for host in layout.topology.hosts:
        steps.append(SetSysctl(layout.netns_of(host.name), SLOW_START_AFTER_IDLE, "0"))
        if rto_min_us is not None:
            steps.append(SetSysctl(layout.netns_of(host.name), RTO_MIN_US, str(rto_min_us)))
    return steps + tcp_buffer_steps(layout)


def rto_min_settable() -> bool:
    """Does this kernel have the per-namespace RTO_MIN_US (read in genie's own namespace, changes nothing)?"""
    return Path("/proc/sys/" + RTO_MIN_US.replace(".", "/")).exists()


def dilated_rto_min_us(dilation: TimeDilation) -> int | None:
    """TCP's minimum RTO under `dilation`: the kernel's 200 ms x N, at most the kernel's RTO ceiling
    (LINUX_RTO_MAX_US); None without dilation or below 1 (the kernel's own default stays)."""
    if dilation.factor <= 1:
        return None
    return min(round(LINUX_RTO_MIN_US * dilation.factor), LINUX_RTO_MAX_US)


def _plan_routes(layout: TestbedLayout) -> _Routing:
    """Static /32 routes to every host from every host and router not attached to the host's segment."""
    topology = layout.topology
    routers = tuple(s for s in topology.switches if s.kind is SwitchKind.ROUTER)
    hosts = {h.name for h in topology.hosts}
    segments = [s for s in layout.segments if s.kind is not SegmentKind.LOOPBACK]
    next_hops = shortest_paths_next_hops(_l3_topology(topology, routers, segments))
    shared: dict[frozenset[str], list[Segment]] = {}
    for segment in segments:
        for a, b in combinations([m.node for m in segment.members], 2):
            shared.setdefault(frozenset((a, b)), []).append(segment)

    routes: list[AddRoute] = []
    forwarders = {r.name for r in routers}
    multipath: set[str] = set()
    for node in [h.name for h in topology.hosts] + [r.name for r in routers]:
        netns = layout.netns_of(node)
        source = layout.address_of(node) if node in hosts else None
        for dst in topology.hosts:
            if dst.name == node:
                continue
            address = layout.address_of(dst.name)
            mine = layout.primary_segment(dst.name).member(node)
            if mine is not None:
                if source is not None and mine.address != source:  # attached, but not through the rank address
                    routes.append(AddRoute(netns, f"{address}/32", (NextHop(mine.ifname),), source))
                continue
            hops = next_hops.get((node, dst.name))
            if not hops:
                raise InputError(f"host {dst.name!r} cannot be reached from {node!r}", path="links")
            nexthops = []
            for hop in hops:
                if hop in hosts and hop != dst.name:
                    forwarders.add(hop)
                for segment in shared[frozenset((node, hop))]:
                    nexthops.append(NextHop(segment.member(node).ifname,  # type: ignore[union-attr]
                                            segment.member(hop).address))  # type: ignore[union-attr]
            if len(nexthops) > 1:
                multipath.add(node)
            routes.append(AddRoute(netns, f"{address}/32", tuple(nexthops), source))
    return _Routing(tuple(routes), frozenset(forwarders), frozenset(multipath))


def _l3_topology(topology: Topology, routers: tuple[Switch, ...], segments: list[Segment]) -> Topology:
    """The topology as IP sees it: bridges vanish, every pair of nodes on one segment is one hop apart."""
    links = []
    seen: set[frozenset[str]] = set()
    for segment in segments:
        for a, b in combinations([m.node for m in segment.members], 2):
            if frozenset((a, b)) not in seen:
                seen.add(frozenset((a, b)))
                links.append(Link(a, b))
    return Topology(topology.name, topology.hosts, routers, tuple(links), topology.subnet)
