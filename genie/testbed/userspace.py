"""The userspace shaper's part of a plan (pure): where packets are queued, what each emulator does, and the
TCP buffers long links need.

Each link direction is emulated where it is *received* by an L3 node (host or router), on the ingress of the
receiving interface (iptables PREROUTING -> NFQUEUE inside the receiving namespace): queueing on the sender's
egress would hold packets against TCP Small Queues and collapse throughput. A bridge namespace does not run
iptables on bridged frames, so on a bridged segment the receiver also emulates the sender's direction into
the bridge and the links between bridges: its emulator tells senders apart by source MAC (genie gives veths
fixed MACs) and runs each packet through the chain of stages of the links it crossed. Queue numbers are the
interface numbers (``eth3`` -> queue 3); one emulator process per namespace handles all of its queues.
"""

from __future__ import annotations

import dataclasses
import zlib

from genie.core.tcp_window import DEFAULT_TCP_RMEM, DEFAULT_TCP_WMEM, tcp_buffer_bytes
from genie.core.testbed import LinkModel
from genie.core.topology import LinkShape
from genie.linkemu.config import EmulatorConfig, QueueSpec, SourceRoute, StageSpec
from genie.testbed.layout import EndLayout, Segment, SegmentKind, TestbedLayout
from genie.testbed.paths import Hop, PathFinder
from genie.testbed.shaping import WIRE_SLACK_NS, UNSHAPED_RATE_BPS, emulator_limit_packets, is_wire, needs_emulation
from genie.testbed.steps import AddQueueRule, PlanStep, SetSysctl, StartEmulator
from genie.topology.link_properties import shape_loss_burst, shape_reorders

MAC_PREFIX = "02:67"  # locally administered, unicast; 0x67 = 'g'
TCP_RMEM = "net.ipv4.tcp_rmem"
TCP_WMEM = "net.ipv4.tcp_wmem"


def veth_macs(link_index: int) -> tuple[str, str]:
    """Fixed MACs of link `link_index`'s two ends (a, b): ``02:67:LL:LL:LL:0E``."""
    octets = [(link_index >> shift) & 0xFF for shift in (16, 8, 0)]
    base = ":".join([MAC_PREFIX] + [f"{octet:02x}" for octet in octets])
    return f"{base}:00", f"{base}:01"


def stage_seed(testbed: str, hop: Hop, receiver: str) -> int:
    """Deterministic per testbed, link direction and receiving node (recorded in the plan)."""
    return zlib.crc32(f"{testbed}|{hop.describe()}|{receiver}".encode()) & 0x7FFFFFFF


def stage_spec(layout: TestbedLayout, hop: Hop, receiver: str, links: LinkModel = LinkModel.BUCKET) -> StageSpec:
    shape = layout.topology.links[hop.link_index].shape
    wire = is_wire(shape, links)
    return StageSpec(
        rate_bps=shape.rate_bps if wire else None,
        wire_slack_ns=WIRE_SLACK_NS if wire else 0,
        name=hop.describe(),
        delay_ns=round(shape.delay_us * 1000),
        jitter_ns=round(shape.jitter_us * 1000),
        reorder=shape_reorders(shape),
        loss_pct=shape.loss_pct,
        loss_burst_packets=shape_loss_burst(shape),
        limit_packets=emulator_limit_packets(shape),
        mtu_bytes=shape.mtu_bytes,
        seed=stage_seed(layout.name, hop, receiver),
    )


def queue_num(ifname: str) -> int:
    return int(ifname.removeprefix("eth"))


def _end_mac(layout: TestbedLayout, end: EndLayout) -> str:
    return veth_macs(end.link_index)[0 if layout.topology.links[end.link_index].a == end.node else 1]


class _ConfigBuilder:
    """The stages (deduplicated by link direction) and queues of one receiving node."""

    def __init__(self, layout: TestbedLayout, node: str, links: LinkModel) -> None:
        self.layout, self.node, self.links = layout, node, links
        self.stages: list[StageSpec] = []
        self._index: dict[Hop, int] = {}
        self.queues: list[QueueSpec] = []

    def chain(self, hops: list[Hop]) -> tuple[int, ...]:
        chain = []
        for hop in hops:
            if not needs_emulation(self.layout.topology.links[hop.link_index].shape, self.links):
                continue
            if hop not in self._index:
                self._index[hop] = len(self.stages)
                self.stages.append(stage_spec(self.layout, hop, self.node, self.links))
            chain.append(self._index[hop])
        return tuple(chain)

    def config(self) -> EmulatorConfig | None:
        if not self.queues:
            return None
        return EmulatorConfig(self.layout.netns_of(self.node), tuple(self.stages), tuple(self.queues))


def _queue_for_end(builder: _ConfigBuilder, finder: PathFinder, end: EndLayout,
                   segments: dict[tuple[str, str], Segment]) -> QueueSpec | None:
    layout = builder.layout
    last_hop = Hop(end.link_index, end.peer, end.node)
    if not finder.is_bridge(end.peer):  # point to point: one direction of one link
        default = builder.chain([last_hop])
        return QueueSpec(queue_num(end.ifname), end.ifname, default) if default else None
    segment = segments[(end.node, end.ifname)]
    routes = []
    for member in segment.members:
        if member.node == end.node:
            continue
        chain = builder.chain(finder.segment_hops(segment, member.node, end.node))
        if chain:
            mac = _end_mac(layout, finder.end(member.node, member.ifname))
            routes.append(SourceRoute(mac, member.node, chain))
    default = builder.chain([last_hop])
    if not routes and not default:
        return None
    return QueueSpec(queue_num(end.ifname), end.ifname, default, tuple(routes))


def emulator_configs(layout: TestbedLayout, links: LinkModel = LinkModel.BUCKET) -> list[EmulatorConfig]:
    """One config per namespace that receives an emulated link direction, in node order."""
    finder = PathFinder(layout)
    segments = {(m.node, m.ifname): s for s in layout.segments if s.kind is SegmentKind.BRIDGED for m in s.members}
    builders: dict[str, _ConfigBuilder] = {}
    for end in layout.ends:
        if end.bridge is not None:  # bridge ports: their directions are emulated by the L3 receivers
            continue
        builder = builders.setdefault(end.node, _ConfigBuilder(layout, end.node, links))
        queue = _queue_for_end(builder, finder, end, segments)
        if queue is not None:
            builder.queues.append(queue)
    configs = []
    for node in layout.topology.node_names():
        if node in builders and (config := builders[node].config()) is not None:
            configs.append(config)
    return configs


def userspace_steps(layout: TestbedLayout, links: LinkModel = LinkModel.BUCKET) -> list[PlanStep]:
    """Per receiving namespace: start its emulator (it binds its queues), then the queue rules."""
    steps: list[PlanStep] = []
    for config in emulator_configs(layout, links):
        steps.append(StartEmulator(config.netns, config))
        steps += [AddQueueRule(config.netns, q.ifname, q.queue_num) for q in config.queues]
    return steps


def tcp_buffer_steps(layout: TestbedLayout) -> list[PlanStep]:
    """Larger ``tcp_rmem``/``tcp_wmem`` maxima in hosts whose longest path (round trip, with jitter) times
    their link rate is more than the namespace defaults hold. Only when some link has a delay."""
    topology = layout.topology
    if not any(link.shape.delay_us or link.shape.jitter_us for link in topology.links):
        return []
    finder = PathFinder(layout)
    names = [h.name for h in topology.hosts]
    steps: list[PlanStep] = []
    for host in topology.hosts:
        others = [name for name in names if name != host.name]
        # a link's shape applies to both directions, so the way back is as long as the way there
        rtt_us = max((2 * _path_delay_us(layout, path.hops) for path in finder.paths_from(host.name, others)),
                     default=0.0)
        rate = _host_rate_bps(layout, host.name)
        size = tcp_buffer_bytes(rate, rtt_us)
        netns = layout.netns_of(host.name)
        if size > DEFAULT_TCP_RMEM[2]:
            steps.append(SetSysctl(netns, TCP_RMEM, f"{DEFAULT_TCP_RMEM[0]} {DEFAULT_TCP_RMEM[1]} {size}"))
        if size > DEFAULT_TCP_WMEM[2]:
            steps.append(SetSysctl(netns, TCP_WMEM, f"{DEFAULT_TCP_WMEM[0]} {DEFAULT_TCP_WMEM[1]} {size}"))
    return steps


def _path_delay_us(layout: TestbedLayout, hops: tuple[Hop, ...]) -> float:
    shapes: list[LinkShape] = [layout.topology.links[hop.link_index].shape for hop in hops]
    return sum(shape.delay_us + shape.jitter_us for shape in shapes)


def _host_rate_bps(layout: TestbedLayout, host: str) -> int:
    rates = [layout.topology.links[end.link_index].shape.rate_bps for end in layout.ends if end.node == host]
    known = [rate for rate in rates if rate is not None]
    return max(known) if known else UNSHAPED_RATE_BPS


def packet_wire_ns(layout: TestbedLayout, hops: tuple[Hop, ...], length_bytes: int,
                   links: LinkModel = LinkModel.BUCKET) -> tuple[int, int]:
    """What the link emulators' wires hold one lone IP packet of `length_bytes` for on a path (`hops`), by their
    own rule (`genie.linkemu.line.Stage.pass_ns`, from idle wires; delays, jitter and loss left out), and how
    many emulators it crosses (one per L3 receiver whose chain of stages has a wire): (ns, emulators). A chain
    ends at each L3 receiver, which emulates every hop since the last one (a bridged segment's two hops: one
    chain), so each chain's first stage starts with its slack. (0, 0) without wire links."""
    from genie.linkemu.line import Stage

    finder = PathFinder(layout)
    total_ns = crossings = 0
    chain: list[Hop] = []
    for index, hop in enumerate(hops):
        chain.append(hop)
        if finder.is_bridge(hop.dst) and index < len(hops) - 1:
            continue
        stages = [Stage(dataclasses.replace(stage_spec(layout, h, hop.dst, links), delay_ns=0, jitter_ns=0))
                  for h in chain if needs_emulation(layout.topology.links[h.link_index].shape, links)]
        chain = []
        if not any(stage.spec.rate_bps for stage in stages):
            continue
        start = first = last = max(stage.spec.wire_slack_ns for stage in stages)  # wires idle since time 0
        for position, stage in enumerate(stages):
            first, last = stage.pass_ns(first, last, length_bytes, arriving=position == 0)
        total_ns += last - start
        crossings += 1
    return total_ns, crossings
