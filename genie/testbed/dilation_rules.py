"""Time dilation on a topology (pure): whether a factor can hold, and which factor ``auto`` takes.

Dilation makes links N times slower and longer in real time. Two things stop it from holding:
* a link whose real rate is so low that one MTU-sized packet takes longer than TCP's minimum retransmission
  timeout (200 ms on Linux): TCP would resend packets still on the wire, so the link no longer behaves like
  one (and each such resend is traffic the stated fabric never carries);
* a real delay beyond what a link can hold (10 s per hop, the topology format's own bound) — the emulator's
  delay line and the kernel's queues are sized for that.
Anything else (a factor too small for this host's limits) is a question of accuracy, not possibility: the run
goes ahead and the manifest's dilation says what the host's limits cost (``auto`` chooses so that they do not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from genie.core.dilation import HostLimit, TimeDilation
from genie.core.errors import InputError
from genie.core.topology import Topology
from genie.core.units import format_rate
from genie.linkemu.line import message_wire_bytes
from genie.topology.link_properties import MAX_DELAY_US

TCP_MIN_RTO_S = 0.2  # Linux's TCP_RTO_MIN
ETHERNET_HEADER_BYTES = 14


def slowest_rate_bps(topology: Topology) -> int | None:
    rates = [link.shape.rate_bps for link in topology.links if link.shape.rate_bps is not None]
    return min(rates) if rates else None


def max_factor(topology: Topology) -> float:
    """The largest factor every link of `topology` holds at (see the module docstring); inf without shaped
    or delayed links."""
    limit = float("inf")
    for link in topology.links:
        shape = link.shape
        if shape.rate_bps is not None:
            packet_bits = 8 * (shape.mtu_bytes + ETHERNET_HEADER_BYTES)
            limit = min(limit, shape.rate_bps * TCP_MIN_RTO_S / packet_bits)
        longest_us = shape.delay_us + shape.jitter_us
        if longest_us > 0:
            limit = min(limit, MAX_DELAY_US / longest_us)
    return limit


def check_dilation_holds(topology: Topology, dilation: TimeDilation, *, source: str | None = None) -> None:
    """InputError naming the first link where `dilation` cannot hold (module docstring), with the largest
    factor that would."""
    if not dilation.active:
        return
    n = dilation.factor
    for index, link in enumerate(topology.links):
        shape = link.shape
        real = dilation.real_shape(shape)
        if real.rate_bps is not None:
            packet_s = 8 * (shape.mtu_bytes + ETHERNET_HEADER_BYTES) / real.rate_bps
            if packet_s > TCP_MIN_RTO_S:
                raise InputError(
                    f"time dilation {n:g} cannot hold: {format_rate(shape.rate_bps)} / {n:g} = "
                    f"{format_rate(real.rate_bps)} takes {packet_s * 1e3:.0f} ms per {shape.mtu_bytes}-byte packet, "
                    f"longer than TCP's minimum retransmission timeout ({TCP_MIN_RTO_S * 1e3:.0f} ms); the largest "
                    f"factor this topology holds is {max_factor(topology):.4g}", source=source,
                    path=f"links[{index}].bandwidth")
        if real.delay_us + real.jitter_us > MAX_DELAY_US:
            raise InputError(
                f"time dilation {n:g} cannot hold: delay x {n:g} = {(real.delay_us + real.jitter_us) / 1e6:g} s "
                f"per hop, more than a link holds ({MAX_DELAY_US / 1e6:g} s); the largest factor this topology "
                f"holds is {max_factor(topology):.4g}", source=source, path=f"links[{index}].delay")


# ---- auto: the smallest factor that keeps this host's limits out of every figure -------------------------------
TARGET_SHARE = 0.02  # what the host's own limits may cost any reported figure
REFERENCE_MESSAGE_BYTES = 1024  # the smallest figure `auto` protects: one such message between two hosts


@dataclass(frozen=True)
class HostFigures:
    """What `genie.services.host_probe` measured on this host, in real time: the software time of one step of
    a collective among `ranks` ranks (interpreter, sockets, kernel and link emulator: everything but the wire),
    the largest aggregate rate at which shaped links still delivered their rate with every host sending
    (`aggregate_bps`), and the link emulator's median release lateness (None when no emulator was in the
    path)."""

    ranks: int
    step_us: float
    aggregate_bps: float
    emulator_late_us: float | None = None


def smallest_step_us(topology: Topology, reference_bytes: int = REFERENCE_MESSAGE_BYTES) -> tuple[float, str]:
    """The shortest time one message of `reference_bytes` (the smallest a run sends) takes between two hosts
    of the stated fabric — every hop's delay and serialization — with the pair: the smallest figure that run
    can report."""
    from genie.testbed.layout import plan_layout
    from genie.testbed.paths import PathFinder

    layout = plan_layout(topology, "auto")
    finder = PathFinder(layout)
    names = [h.name for h in topology.hosts]
    best, pair = float("inf"), ""
    for src in names:
        for path in finder.paths_from(src, [n for n in names if n != src]):
            time_us = 0.0
            for hop in path.hops:
                shape = topology.links[hop.link_index].shape
                bits = 8 * message_wire_bytes(reference_bytes, shape.mtu_bytes)
                time_us += shape.delay_us + (bits / shape.rate_bps * 1e6 if shape.rate_bps else 0.0)
            if 0 < time_us < best:
                best, pair = time_us, f"{src}->{path.dst}"
    return best, pair


def demanded_bps(topology: Topology) -> float:
    """What the stated fabric's hosts can send at once: every host's shaped links at their rates (a host with
    an unshaped link asks for nothing the dilation could lower)."""
    hosts = {h.name for h in topology.hosts}
    total = 0.0
    for link in topology.links:
        if link.shape.rate_bps is not None:
            total += link.shape.rate_bps * sum(1 for end in link.endpoints if end in hosts)
    return total


def nice_factor(factor: float) -> float:
    """`factor` rounded up to 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten (a factor people can read)."""
    if factor <= 1:
        return 1.0
    exponent = math.floor(math.log10(factor))
    for step in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        value = step * 10**exponent
        if value >= factor * (1 - 1e-12):
            return float(value)
    return float(10 ** (exponent + 1))


def choose_dilation(topology: Topology, figures: HostFigures, *, source: str | None = None,
                    reference_bytes: int = REFERENCE_MESSAGE_BYTES) -> TimeDilation:
    """The smallest (rounded) factor at which each measured limit of this host costs under TARGET_SHARE of the
    smallest figure a run on `topology` reports — one message of `reference_bytes`, the smallest the run sends
    (1 KiB when the run is not known yet) — and whose summed link rates stay within what the host delivered
    through shaped links; InputError when the topology cannot hold it (`check_dilation_holds`)."""
    step_us, pair = smallest_step_us(topology, reference_bytes)
    what = f"a {reference_bytes}-byte message"
    limits = []
    if math.isfinite(step_us):
        need = figures.step_us / (TARGET_SHARE * step_us)
        limits.append(HostLimit("software", figures.step_us, "us per step", need,
                                f"{figures.step_us:.1f} us of software per step with {figures.ranks} ranks must be "
                                f"under {TARGET_SHARE:.0%} of {what} ({step_us:.3g} us, {pair}): N >= {need:.4g}"))
    demand = demanded_bps(topology)
    if demand and 0 < figures.aggregate_bps < float("inf"):
        need = demand / figures.aggregate_bps
        limits.append(HostLimit("throughput", figures.aggregate_bps, "bit/s", need,
                                f"the hosts' links ask {format_rate(round(demand))} at once; shaped links on this "
                                f"host delivered their rate up to {format_rate(round(figures.aggregate_bps))} "
                                f"in all: N >= {need:.4g}"))
    if figures.emulator_late_us is not None and math.isfinite(step_us):
        need = figures.emulator_late_us / (TARGET_SHARE * step_us)
        limits.append(HostLimit("emulator", figures.emulator_late_us, "us late", need,
                                f"the link emulator releases packets {figures.emulator_late_us:.1f} us late (median), "
                                f"to be under {TARGET_SHARE:.0%} of {what}: N >= {need:.4g}"))
    need = max([1.0] + [limit.needed_factor for limit in limits])
    factor = nice_factor(need)
    binding = max(limits, key=lambda limit: limit.needed_factor).name if limits and need > 1 else None
    driver = f" for {what}" if binding in ("software", "emulator") else ""  # the message size decides those
    reason = (f"auto: {binding} needs N >= {need:.4g}{driver}, rounded up" if binding
              else "auto: this host's limits cost under 2% without dilation")
    holds = max_factor(topology)
    if factor > holds:
        raise InputError(f"auto dilation needs N >= {need:.4g} on this host ({binding}), but the topology holds "
                         f"only up to {holds:.4g} (its slowest link would no longer be a wire); give a smaller "
                         "factor and accept the host's limits in the figures, or a faster topology",
                         source=source, path="time_dilation")
    return TimeDilation(factor, reason, tuple(limits))
