"""`genie testbed verify`, the pure part: which host pairs to measure, what their links promise, how a
measurement compares (rows of a table and of ``links_verify.csv``).

Links are measured end to end between hosts: a link between switches, or between a host and a switch, is
covered by a host pair whose path crosses it, and the configured values of a pair are those of its whole
path: the round trip is the sum of every crossed link's delay both ways, the rate the smallest rate on the
way, the loss ``1 - prod(1 - loss)`` per direction. Pairs are chosen greedily so that every link is crossed
by at least one pair (a star of N hosts takes N/2 pairs: h0-h1, h2-h3, ...).

On wire links (``--links wire``) the round trip also holds the RTT probe's own packet serialized on every wire of
the path, by the link emulator's rule (`genie.testbed.userspace.packet_wire_ns`: the wire's slack included):
negligible at 1 Gbit/s (0.44 us per hop), 176 us per hop at 2.5 Mbit/s (1 Gbit/s under time dilation 400). An
emulator may release a packet up to 100 us before its time (its wake-up compensation), so a wire path's round
trip may be early by that much per emulator crossed, but never by more than its wire time (a path without wires
keeps its tolerance).
"""

from __future__ import annotations

import csv
import io
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import IO

from genie.core.dilation import TimeDilation
from genie.core.testbed import LinkModel
from genie.core.errors import InputError
from genie.core.files import write_atomic
from genie.core.units import describe_rate
from genie.testbed.layout import TestbedLayout
from genie.testbed.paths import HostPath, PathFinder, one_way_delay_us, path_loss_pct, path_rate_bps
from genie.testbed.probe import ECHO_IP_BYTES
from genie.linkemu.config import MAX_COMPENSATION_NS
from genie.testbed.userspace import packet_wire_ns

RTT_TOLERANCE_PCT = 5.0
RTT_TOLERANCE_FLOOR_US = 20.0
UNDELAYED_RTT_LIMIT_US = 250.0  # a path without configured delay: its own stack latency (16-47 us measured on a
# loaded 2-core VM, above the 20 us floor) is fine; an emulator or qdisc delaying it by a configured-looking
# amount is not
RATE_TOLERANCE_PCT = 5.0
LOSS_TOLERANCE_PP = 1.0
CPU_CEILING_BUSY = 0.9  # a flow short of its rate while the machine was this busy hit the machine's ceiling
TCP_IP_HEADERS_BYTES = 52  # IPv4 20 + TCP 20 + timestamps 12
ETHERNET_HEADER_BYTES = 14  # counted by HTB on a veth's egress


class Metric(Enum):
    RTT = "rtt"
    THROUGHPUT = "throughput"
    LOSS = "loss"


class Status(Enum):
    OK = "ok"
    FAIL = "FAIL"
    CEILING = "ceiling"  # short of the target while the CPUs were saturated: the machine's limit, reported
    INFO = "info"  # nothing configured to compare with (unshaped rate, TCP on a lossy path)


UNITS = {Metric.RTT: "us", Metric.THROUGHPUT: "bit/s", Metric.LOSS: "%"}


@dataclass(frozen=True)
class PairTargets:
    """What the links between two hosts promise."""

    there: HostPath
    back: HostPath
    rtt_us: float
    rate_there_bps: int | None
    rate_back_bps: int | None
    loss_there_pct: float
    loss_back_pct: float
    mtu_bytes: int
    wire_rtt_us: float = 0.0  # of rtt_us: the RTT probe's packet on the path's wires, both ways
    early_us: float = 0.0  # how early its emulators may release it: 100 us per emulator, at most wire_rtt_us

    @property
    def links(self) -> str:
        indices = sorted({hop.link_index for hop in self.there.hops} | {hop.link_index for hop in self.back.hops})
        return "+".join(f"links[{i}]" for i in indices)

    @property
    def route(self) -> str:
        return self.there.describe()


@dataclass(frozen=True)
class VerifyRow:
    links: str  # "links[0]+links[1]"
    route: str  # "h0-s0-h1"
    direction: str  # "h0->h1", or "h0<->h1" for the round trip
    metric: Metric
    configured: float | None
    measured: float | None
    error_pct: float | None  # (measured - expected) / expected; for loss the difference in points
    tolerance: str
    status: Status
    note: str = ""


def choose_pairs(layout: TestbedLayout, pairs: Sequence[tuple[str, str]] | None = None,
                 links: LinkModel = LinkModel.BUCKET) -> list[PairTargets]:
    """Host pairs that together cross every link (both directions measured per pair), or the given `pairs`;
    `links`: the testbed's link model (its wires add the probe's serialization to the round trip)."""
    topology = layout.topology
    hosts = [h.name for h in topology.hosts]
    finder = PathFinder(layout)
    if pairs is not None:
        for pair in pairs:
            for host in pair:
                if host not in hosts:
                    raise InputError(f"no host {host!r} in testbed {layout.name!r}", path="pair")
            if pair[0] == pair[1]:
                raise InputError(f"expected two different hosts, got {pair[0]!r} twice", path="pair")
        return [pair_targets(layout, finder.path(a, b), finder.path(b, a), links) for a, b in pairs]
    paths: dict[tuple[str, str], HostPath] = {}
    for src in hosts:
        for path in finder.paths_from(src, [h for h in hosts if h != src]):
            paths[(src, path.dst)] = path
    crossing: dict[tuple[str, str], set[int]] = {}
    for a_index, a in enumerate(hosts):
        for b in hosts[a_index + 1:]:
            crossing[(a, b)] = ({hop.link_index for hop in paths[(a, b)].hops}
                                | {hop.link_index for hop in paths[(b, a)].hops})
    uncovered = set(range(len(topology.links)))
    chosen: list[tuple[str, str]] = []
    for index in range(len(topology.links)):
        if index not in uncovered:
            continue
        candidates = [pair for pair, links in crossing.items() if index in links]
        if not candidates:
            uncovered.discard(index)  # a link no host pair crosses (cannot happen in a connected topology)
            continue
        best = max(candidates, key=lambda pair: len(crossing[pair] & uncovered))
        chosen.append(best)
        uncovered -= crossing[best]
    return [pair_targets(layout, paths[(a, b)], paths[(b, a)], links) for a, b in chosen]


def uncovered_links(layout: TestbedLayout, targets: Sequence[PairTargets]) -> list[int]:
    """Links no measured path crosses: equal-cost alternatives (routers spread flows over them by hash, so a
    host pair's path through them cannot be chosen); in genie's fabrics they have the shapes of the others."""
    crossed = {hop.link_index for t in targets for hop in t.there.hops + t.back.hops}
    return [index for index in range(len(layout.topology.links)) if index not in crossed]


def pair_targets(layout: TestbedLayout, there: HostPath, back: HostPath,
                 links: LinkModel = LinkModel.BUCKET) -> PairTargets:
    shapes = [layout.topology.links[hop.link_index].shape for hop in there.hops + back.hops]
    wire = [packet_wire_ns(layout, path.hops, ECHO_IP_BYTES, links) for path in (there, back)]
    wire_us = sum(ns for ns, _ in wire) / 1000
    rtt_us = one_way_delay_us(layout, there) + one_way_delay_us(layout, back)
    return PairTargets(there, back, rtt_us + wire_us if wire_us else rtt_us,
                       path_rate_bps(layout, there), path_rate_bps(layout, back), path_loss_pct(layout, there),
                       path_loss_pct(layout, back), min((s.mtu_bytes for s in shapes), default=1500), wire_us,
                       min(wire_us, sum(count for _, count in wire) * MAX_COMPENSATION_NS / 1000))


def emulated_row(row: VerifyRow, dilation: TimeDilation) -> VerifyRow:
    """A row measured on a dilated testbed (against its real shapes: rate / N, delay x N) in the stated
    fabric's units: round trips / N, rates x N; the check itself (status, relative error, tolerance) is the
    real one, and the note says so."""
    if not dilation.active or row.metric is Metric.LOSS:
        return row
    scale = (1 / dilation.factor) if row.metric is Metric.RTT else dilation.factor
    real = f"measured at time dilation {dilation.factor:g}: real {format_value(row.metric, row.measured)} " \
           f"against {format_value(row.metric, row.configured)} (tolerance {row.tolerance} real)"
    return replace(row, configured=None if row.configured is None else row.configured * scale,
                   measured=None if row.measured is None else row.measured * scale,
                   note=f"{real}; {row.note}" if row.note else real)


def goodput_bps(rate_bps: int, mtu_bytes: int) -> float:
    """What one TCP flow carries at most over a link shaped to `rate_bps` (HTB counts Ethernet and TCP/IP
    headers; payload 1448 of 1514 bytes per full segment at MTU 1500)."""
    payload = mtu_bytes - TCP_IP_HEADERS_BYTES
    return rate_bps * payload / (mtu_bytes + ETHERNET_HEADER_BYTES)


def rate_from_timeline(timeline: Sequence[Sequence[int]], warmup_s: float) -> float | None:
    """Bits per second received after the first ``warmup_s`` of a sink timeline [(ns, bytes so far), ...]."""
    if len(timeline) < 2:
        return None
    start_ns = timeline[0][0] + warmup_s * 1e9
    after = [point for point in timeline if point[0] >= start_ns]
    if len(after) < 2:
        after = list(timeline[-2:])
    (t0, b0), (t1, b1) = after[0], after[-1]
    return (b1 - b0) * 8 / ((t1 - t0) / 1e9) if t1 > t0 else None


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def rtt_row(target: PairTargets, samples_us: Sequence[float], baseline_us: Sequence[float],
            sent: int) -> VerifyRow:
    raw, base = median(samples_us), median(baseline_us) or 0.0
    tolerance = max(RTT_TOLERANCE_PCT / 100 * target.rtt_us, RTT_TOLERANCE_FLOOR_US)
    direction = f"{target.there.src}<->{target.there.dst}"
    if raw is None:
        return VerifyRow(target.links, target.route, direction, Metric.RTT, target.rtt_us, None, None,
                         f"±{tolerance:.0f}us", Status.FAIL, f"no echo of {sent} probes")
    measured = raw - base
    error = measured - target.rtt_us
    note = (f"median of {len(samples_us)}/{sent} probes {raw:.1f}us minus probe overhead {base:.1f}us "
            "(loopback)")
    early = target.early_us
    if target.wire_rtt_us:
        note = (f"{target.wire_rtt_us:.1f}us of it the probe's {ECHO_IP_BYTES}-byte packet on the wires "
                f"(their emulators may release it up to {early:.0f}us early); " + note)
    if target.rtt_us == target.wire_rtt_us:  # no delay configured: the veth/bridge path's own round trip
        if not target.wire_rtt_us:
            status = Status.OK if measured <= UNDELAYED_RTT_LIMIT_US else Status.FAIL
            return VerifyRow(target.links, target.route, direction, Metric.RTT, 0.0, round(measured, 1), None,
                             f"<={UNDELAYED_RTT_LIMIT_US:.0f}us", status, "no delay configured; " + note)
        # ... after the probe's time on the wires, which it may beat by the emulators' early release only
        ok = -tolerance - early <= error <= UNDELAYED_RTT_LIMIT_US
        return VerifyRow(target.links, target.route, direction, Metric.RTT, target.rtt_us, round(measured, 1),
                         None, f"-{tolerance + early:.0f}/+{UNDELAYED_RTT_LIMIT_US:.0f}us",
                         Status.OK if ok else Status.FAIL, "no delay configured; " + note)
    status = Status.OK if -tolerance - early <= error <= tolerance else Status.FAIL
    band = f"-{tolerance + early:.0f}/+{tolerance:.0f}us" if early else f"±{tolerance:.0f}us"
    return VerifyRow(target.links, target.route, direction, Metric.RTT, target.rtt_us, round(measured, 1),
                     _pct(error, target.rtt_us), band, status, note)


def throughput_row(target: PairTargets, src: str, dst: str, rate_bps: int | None, loss_pct: float,
                   measured_bps: float | None, cpu_busy: float | None) -> VerifyRow:
    cpu = f"CPU {100 * cpu_busy:.0f}% busy" if cpu_busy is not None else "CPU unknown"
    direction = f"{src}->{dst}"
    if rate_bps is None:
        return VerifyRow(target.links, target.route, direction, Metric.THROUGHPUT, None, _round(measured_bps),
                         None, "", Status.INFO, f"unshaped: one TCP flow reaches this here ({cpu})")
    expected = goodput_bps(rate_bps, target.mtu_bytes)
    note = f"TCP goodput of {describe_rate(rate_bps)} is {describe_rate(expected)}; {cpu}"
    if measured_bps is None:
        return VerifyRow(target.links, target.route, direction, Metric.THROUGHPUT, expected, None, None,
                         f"±{RATE_TOLERANCE_PCT:g}%", Status.FAIL, "no data received; " + note)
    error = _pct(measured_bps - expected, expected)
    if loss_pct > 0:
        status = Status.INFO
        note = f"TCP cannot fill a path with {loss_pct:g}% loss; " + note
    elif abs(error or 0) <= RATE_TOLERANCE_PCT:
        status = Status.OK
    elif measured_bps < expected and cpu_busy is not None and cpu_busy >= CPU_CEILING_BUSY:
        status = Status.CEILING
        note = "this machine's ceiling for this path (CPU-bound); " + note
    else:
        status = Status.FAIL
    return VerifyRow(target.links, target.route, direction, Metric.THROUGHPUT, round(expected),
                     _round(measured_bps), error, f"±{RATE_TOLERANCE_PCT:g}%", status, note)


def loss_row(target: PairTargets, src: str, dst: str, loss_pct: float, sent: int, received: int) -> VerifyRow:
    measured = 100 * (sent - received) / sent if sent else None
    direction = f"{src}->{dst}"
    if measured is None:
        return VerifyRow(target.links, target.route, direction, Metric.LOSS, loss_pct, None, None,
                         f"±{LOSS_TOLERANCE_PP:g}pp", Status.FAIL, "no probes sent")
    difference = measured - loss_pct
    status = Status.OK if abs(difference) <= LOSS_TOLERANCE_PP else Status.FAIL
    return VerifyRow(target.links, target.route, direction, Metric.LOSS, loss_pct, round(measured, 3),
                     round(difference, 3), f"±{LOSS_TOLERANCE_PP:g}pp", status,
                     f"{sent - received} of {sent} UDP probes lost (error in percentage points)")


def _pct(difference: float, reference: float) -> float | None:
    return round(100 * difference / reference, 2) if reference else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value)


# --- output --------------------------------------------------------------------------------------------------

CSV_COLUMNS = ("links", "route", "direction", "metric", "unit", "configured", "measured", "error_pct", "tolerance",
               "status", "note")


def write_verify_csv(rows: Sequence[VerifyRow], stream: IO[str]) -> None:
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow([row.links, row.route, row.direction, row.metric.value, UNITS[row.metric],
                         _cell(row.configured), _cell(row.measured), _cell(row.error_pct), row.tolerance,
                         row.status.value, row.note])


def write_verify_csv_file(rows: Sequence[VerifyRow], path: str | os.PathLike[str]) -> Path:
    """Write ``links_verify.csv`` atomically (temp file + rename): never a partial file."""
    buffer = io.StringIO()
    write_verify_csv(rows, buffer)
    return write_atomic(path, buffer.getvalue())


def format_value(metric: Metric, value: float | None) -> str:
    if value is None:
        return "-"
    if metric is Metric.RTT:
        return f"{value / 1000:.3f} ms" if value >= 1000 else f"{value:.1f} us"
    if metric is Metric.THROUGHPUT:
        return f"{value / 1e9:.3f} Gbit/s" if value >= 1e9 else f"{value / 1e6:.1f} Mbit/s"
    return f"{value:.2f} %"


def format_table(rows: Sequence[VerifyRow]) -> list[str]:
    header = ("link", "route", "direction", "metric", "configured", "measured", "error", "status")
    table = [header]
    for row in rows:
        error = "-" if row.error_pct is None else (f"{row.error_pct:+.2f} pp" if row.metric is Metric.LOSS
                                                   else f"{row.error_pct:+.1f} %")
        table.append((row.links, row.route, row.direction, row.metric.value,
                      format_value(row.metric, row.configured), format_value(row.metric, row.measured), error,
                      row.status.value))
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table]


def _cell(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}".rstrip("0")
