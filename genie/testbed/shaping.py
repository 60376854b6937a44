"""From a LinkShape to the qdisc steps on one interface's egress. Pure.

Every shaped veth end gets (each direction of a link is shaped at the sender):
* ``rate_bps`` -> HTB root ``1:`` with class ``1:1``, its buckets from `genie.core.htb.htb_buckets`. HTB sends
  only while both of the class's token buckets allow it, and genie gives them two jobs:
  - the *ceil* bucket sets the instantaneous rate: ``ceil = rate * 1.02`` with ``cburst = max(128 KiB,
    rate * 1 ms)`` — what the kernel hands over at once (GSO packets up to 64 KiB) and about 1 ms at the rate;
  - the *rate* bucket sets the long-term rate, exactly ``rate``, with ``burst = max(cburst, rate * 8 ms)``.
  HTB's watchdog timer fires late on a loaded host (more than 1 ms with 8 ranks and 16 shaped veth ends on
  2 cores); the time lost is never made up when both buckets are ``rate`` with a small burst: 64 MiB ring
  all-reduces on an 8-host 1 Gbit/s star measured busbw 0.1136-0.1174 GB/s, 2-3% under the TCP payload
  limit (0.1196) that 8 raw TCP flows reach. With the larger rate bucket the link pays lost time back at up
  to 2% above the rate, and averages the rate: 0.1178-0.1196, same runs interleaved. The price: right
  after an idle period a transfer longer than ``cburst`` runs up to 2% faster than ``rate`` until the rate
  bucket is spent (at 1 Gbit/s: for its first ~50 MB).
  The quantum follows HTB's r2q rule (rate / 10) kept within [MTU + Ethernet header, 200000] (measured:
  200000 reaches 1 Gbit/s).
* delay / jitter / loss -> with the KERNEL shaper netem under class 1:1 (or at the root when there is no
  rate; needs sch_netem). Its queue limit is ``queue_packets`` or enough for twice the bandwidth-delay product.
  With the USERSPACE shaper the receiving namespace's link emulator does it (`genie.testbed.userspace`), and
  the sender's egress keeps only HTB (plus a pfifo of ``queue_packets``, like a queue alone).
* ``queue_packets`` alone -> a pfifo with that limit under class 1:1 (or at the root).
Unshaped ends get no qdisc at all.

The ACK lane. HTB's class 1:1 queues what it cannot send yet in one FIFO, and on veths (GSO packets of up
to 64 KiB) that FIFO is as deep as the senders' windows: on the oversubscribed leaf-spine a 500 Mbit/s
fabric link held ~3 MB, about 48 ms. A TCP flow whose ACKs wait behind another flow's data there is held
back by its send buffer (window / round trip) although its own path is free, so which link a connection's
ACKs hash onto decided whether a ring all-reduce ran at the link rate or at a third of it (measured: one
DP ring's 27.6 MB bucket in 1.9-2.0 s instead of 0.69 s, in both iterations of a testbed session whose data
paths did not collide). A real switch port holds microseconds, not tens of milliseconds, and the fabric
model shares links among data flows only. So every HTB root also has class 1:2, prio 0 (served before 1:1),
rate and ceil ``ceil_bps``, and u32 filters send it the pure ACKs: IPv4 with a 20-byte header, TCP, a total
length of exactly the two headers (no payload: one filter per TCP data offset), and of the flags URG ACK PSH
RST SYN FIN only ACK. A segment that carries data, however small, stays in 1:1: in the lane it would overtake
its flow's queued data. The lane assumes connections that carry data one way, as genie's ranks open them (a
connection per peer and direction, `genie.engine.links.PeerLink`). A connection with data both ways
sends its data behind the FIFO and its pure ACKs ahead of it, so its data arrives with ACK fields that Linux
may find too old (RFC 5961) and discard, data and all: while genie's all-to-all still sent both ways on one
connection, the lane raised MoE EP8's retransmissions on the oversubscribed leaf-spine about tenfold with no
packet dropped anywhere (benchmarks/README.md, "The ACK lane", "A connection per direction").
Pure ACKs are not charged to 1:1's rate: measured, they were 0.035% of a saturated link's bytes (GRO
acknowledges up to 64 KiB at once); one ACK per two full segments would be 2.3%. With the KERNEL shaper the
lane gets its own netem (handle 20:) with the link's delay, jitter and loss, so ACKs are delayed like the
rest; the userspace emulator delays them at the receiver as it does everything else.

With the WIRE link model (`genie.core.testbed.LinkModel`) a rate-shaped link is also a wire: netem's ``rate``
under the HTB class (KERNEL shaper) or a wire stage in the receiver's link emulator (USERSPACE) serializes
every packet at exactly the rate, so what HTB's buckets let through at once after an idle period still takes
its bytes' time on the link. HTB stays: it holds the queue at the sender (TCP's backpressure) and keeps the
long-term rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from genie.core.errors import InputError
from genie.core.htb import htb_buckets
from genie.core.dilation import TimeDilation
from genie.core.testbed import LinkModel, Shaping
from genie.core.topology import LinkShape, Topology
from genie.core.units import format_size
from genie.testbed.steps import AddHtb, AddNetem, AddPfifo, PlanStep, QdiscParent, Shaper, StartEmulator

MAX_QUANTUM_BYTES = 200_000
HTB_R2Q = 10
ETHERNET_HEADER_BYTES = 14
DEFAULT_NETEM_LIMIT_PACKETS = 1000
UNSHAPED_RATE_BPS = 20 * 10**9  # what a veth carries unshaped, for sizing netem's queue
EMULATOR_SLACK_US = 5000.0  # the userspace emulator may answer this late under load: its line holds that too
WIRE_SLACK_NS = 100_000  # how late the sender's HTB may hand a packet to an idle wire (genie.linkemu.line)


def htb_class(netns: str, ifname: str, rate_bps: int, mtu_bytes: int) -> AddHtb:
    """The HTB root and class for `rate_bps` on one interface (see the module docstring for the buckets)."""
    buckets = htb_buckets(rate_bps)  # the one rule (genie.core.htb), which the fabric model plays too
    return AddHtb(netns, ifname, rate_bps, burst_bytes=buckets.burst_bytes, ceil_bps=buckets.ceil_bps,
                  cburst_bytes=buckets.cburst_bytes, quantum_bytes=htb_quantum_bytes(rate_bps, mtu_bytes))


def htb_quantum_bytes(rate_bps: int, mtu_bytes: int) -> int:
    return max(mtu_bytes + ETHERNET_HEADER_BYTES, min(MAX_QUANTUM_BYTES, rate_bps // 8 // HTB_R2Q))


def netem_limit_packets(shape: LinkShape) -> int:
    if shape.queue_packets is not None:
        return shape.queue_packets
    rate_bps = shape.rate_bps or UNSHAPED_RATE_BPS
    bdp_packets = rate_bps / 8 * (shape.delay_us + shape.jitter_us) / 1e6 / shape.mtu_bytes
    return max(DEFAULT_NETEM_LIMIT_PACKETS, math.ceil(2 * bdp_packets))


def emulator_limit_packets(shape: LinkShape) -> int:
    """The userspace delay line's limit (in MTU-sized segments): ``queue_packets``, or twice the
    bandwidth-delay product with the emulator's own slack added to the delay (at least 1000)."""
    if shape.queue_packets is not None:
        return shape.queue_packets
    rate_bps = shape.rate_bps or UNSHAPED_RATE_BPS
    held_s = (shape.delay_us + shape.jitter_us + EMULATOR_SLACK_US) / 1e6
    return max(DEFAULT_NETEM_LIMIT_PACKETS, math.ceil(2 * rate_bps / 8 * held_s / shape.mtu_bytes))


def is_shaped(shape: LinkShape) -> bool:
    return shape.rate_bps is not None or shape.needs_delay_emulation or shape.queue_packets is not None


def is_wire(shape: LinkShape, links: LinkModel) -> bool:
    """A rate-shaped link under the WIRE model: its packets are serialized by netem or the emulator."""
    return links is LinkModel.WIRE and shape.rate_bps is not None


def needs_emulation(shape: LinkShape, links: LinkModel) -> bool:
    """Does the link need netem or the userspace emulator: delay, jitter, loss, or a wire to serialize on?"""
    return shape.needs_delay_emulation or is_wire(shape, links)


def check_delay_emulation(shape: LinkShape, *, shaper: Shaper, netem_available: bool, link_path: str,
                          source: str | None = None, links: LinkModel = LinkModel.BUCKET) -> None:
    """Fail up front when the shape needs delay emulation this machine cannot give."""
    if not needs_emulation(shape, links) or shaper is Shaper.USERSPACE:
        return
    if not netem_available:
        wanted = ", ".join(what for what, value in (("delay", shape.delay_us), ("jitter", shape.jitter_us),
                                                    ("loss", shape.loss_pct),
                                                    ("a wire", is_wire(shape, links))) if value)
        raise InputError(f"asks for {wanted}, which needs the qdisc sch_netem, missing from this kernel; "
                         "use --shaper userspace (or auto), or a kernel with sch_netem",
                         source=source, path=link_path)


def shaping_steps(netns: str, ifname: str, shape: LinkShape, shaper: Shaper = Shaper.KERNEL,
                  links: LinkModel = LinkModel.BUCKET) -> list[PlanStep]:
    """Qdisc steps for one interface's egress (empty when the shape shapes nothing). With the USERSPACE shaper
    delay, jitter, loss and the wire are left to the receiver's emulator."""
    steps: list[PlanStep] = []
    parent = QdiscParent.ROOT
    if shape.rate_bps is not None:
        steps.append(htb_class(netns, ifname, shape.rate_bps, shape.mtu_bytes))
        parent = QdiscParent.HTB_CLASS
    if needs_emulation(shape, links) and shaper is Shaper.KERNEL:
        steps.append(AddNetem(netns, ifname, parent, shape.delay_us, shape.jitter_us, shape.loss_pct,
                              netem_limit_packets(shape), shape.rate_bps if is_wire(shape, links) else None))
        if parent is QdiscParent.HTB_CLASS and shape.needs_delay_emulation:  # the ACK lane is delayed alike
            steps.append(AddNetem(netns, ifname, QdiscParent.ACK_CLASS, shape.delay_us, shape.jitter_us,
                                  shape.loss_pct, netem_limit_packets(shape)))
    elif shape.queue_packets is not None:
        steps.append(AddPfifo(netns, ifname, parent, shape.queue_packets))
    return steps


def shaper_summary(steps: list[PlanStep]) -> Shaping:
    """The qdisc kinds (and the userspace emulator) a plan uses, for TestbedInfo.shaper: NONE, HTB,
    HTB | NETEM, HTB | USERSPACE, ..."""
    shaping = Shaping.NONE
    for kind, step_type in ((Shaping.HTB, AddHtb), (Shaping.NETEM, AddNetem), (Shaping.PFIFO, AddPfifo),
                            (Shaping.USERSPACE, StartEmulator)):
        if any(isinstance(step, step_type) for step in steps):
            shaping |= kind
    return shaping


def default_link_model(topology: Topology, dilation: TimeDilation) -> LinkModel:
    """WIRE where it costs little or matters most: on a dilated testbed (real rates are N times lower, so
    serializing every packet in the emulator or netem is cheap, and the figures are about a fast fabric whose
    wires are what is measured) and where some link is delayed anyway (the emulator or netem is in the path
    already). BUCKET otherwise: an undilated testbed of rate-only links keeps HTB alone, as fast as this host
    goes (a wire at 1 Gbit/s per link costs the userspace emulator about 3 CPU-seconds per GB here; see
    docs/testbed.md)."""
    if dilation.active or any(link.shape.needs_delay_emulation for link in topology.links):
        return LinkModel.WIRE
    return LinkModel.BUCKET


@dataclass(frozen=True)
class BucketBurst:
    """Message sizes a testbed's bucket links can carry faster than their wire. After an idle period HTB's
    ceil bucket lets ``cburst`` (>= 128 KiB) leave at veth speed and the rate bucket (`burst_bytes`, the
    largest among the rate-shaped links at their real rates: max(cburst, 8 ms of the rate)) lets the link run
    above its rate until it is spent, so a message no larger than `burst_bytes` can arrive sooner than its
    bytes take at the rate (measured at 1 Gbit/s: all-reduce busbw 1.05-1.15 of the payload limit at 64 KiB,
    one-way times 36-51 % under the wire at 16-256 KiB, 12 % at 1 MiB; docs/dilation.md)."""

    burst_bytes: int
    sizes_bytes: tuple[int, ...]  # the sizes asked for within the burst, ascending

    def what(self) -> str:
        return (f"sizes {_size(self.sizes_bytes[0])}-{_size(self.sizes_bytes[-1])} are within the "
                f"{_size(self.burst_bytes)} token-bucket burst of this testbed's bucket links, where a message can "
                f"beat the wire (busbw above the payload limit)")

    def describe(self) -> str:
        """One line for a run's manifest (flag names are the CLI's)."""
        return f"{self.what()}; for a wire: link model wire, or time dilation"


def _size(size_bytes: int) -> str:
    return format_size(size_bytes) if size_bytes % 1024 == 0 or size_bytes < 1024 else f"~{round(size_bytes / 1024)}KiB"


def bucket_burst(topology: Topology, links: LinkModel, dilation: TimeDilation,
                 sizes_bytes: Sequence[int]) -> BucketBurst | None:
    """The burst range of `sizes_bytes` on a testbed of `topology` (None: wire links, no rate-shaped link, or
    no size within the burst). The one rule: a size is in the burst range when it is at most the burst of
    some rate-shaped link's HTB rate bucket (`genie.core.htb.htb_buckets` at the link's real rate)."""
    if links is LinkModel.WIRE:
        return None
    bursts = [htb_buckets(rate).burst_bytes for link in topology.links
              if (rate := dilation.real_shape(link.shape).rate_bps) is not None]
    if not bursts:
        return None
    burst = max(bursts)
    within = tuple(sorted({s for s in sizes_bytes if s <= burst}))
    return BucketBurst(burst, within) if within else None
