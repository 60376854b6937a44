"""TCP flows seen at one capture point: bytes, packets, retransmissions and RTT samples per 5-tuple direction.

Pure functions over parsed packets (`TcpSegment`), so they are unit-tested with synthetic segments; the
capture itself (raw socket, pcap file) lives in `genie.report.capture`.

Definitions (one capture point, e.g. one end of a testbed link, seeing both directions):
- a **flow** is one direction of a TCP connection: (src, sport, dst, dport);
- **bytes** is the TCP payload of every packet of the direction, retransmissions included (a GSO/TSO
  super-packet counts once as a packet, with its whole payload);
- a **retransmission** is a data segment whose sequence range starts below the highest sequence number the
  direction already sent (its range, or part of it, was seen before);
- an **RTT sample** is the time from a data segment to the first packet of the reverse direction whose ACK
  covers the segment's end (a cumulative ACK covering several segments gives one sample per segment).
  Karn's rule: retransmitted segments, and earlier segments they overlap, give no sample.
Sequence and acknowledgement numbers are unwrapped to 64 bits, so flows longer than 4 GiB work.
"""

from __future__ import annotations

import statistics
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10
_ETH_P_IP, _ETH_P_8021Q = 0x0800, 0x8100
_IPPROTO_TCP = 6
_MOD = 1 << 32


@dataclass(frozen=True)
class TcpSegment:
    """One captured TCP packet (IPv4). `ts_ns`: capture time (ns, any clock; pcap files use the Unix epoch)."""

    ts_ns: int
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    ack: int
    flags: int
    payload_bytes: int

    @property
    def key(self) -> tuple[str, int, str, int]:
        return (self.src, self.sport, self.dst, self.dport)

    @property
    def reverse_key(self) -> tuple[str, int, str, int]:
        return (self.dst, self.dport, self.src, self.sport)


@dataclass(frozen=True)
class FlowStats:
    """One direction of a TCP connection as seen at the capture point (units in the names; times in ns)."""

    src: str
    sport: int
    dst: str
    dport: int
    bytes: int
    packets: int
    retransmissions: int
    rtt_samples: int
    rtt_median_us: float | None
    first_ns: int
    last_ns: int


def _ip(raw: bytes) -> str:
    return "%d.%d.%d.%d" % tuple(raw)


def decode_ethernet_frame(ts_ns: int, frame: bytes, wire_len: int | None = None) -> TcpSegment | None:
    """The TCP segment in an Ethernet II frame (IPv4, optional 802.1Q tag), or None for anything else.

    `frame` may be cut short (snaplen): the headers are enough. The payload length comes from the IP total
    length; when that is 0 (a large TSO packet), from `wire_len`, the frame's length on the wire."""
    offset = 12
    if len(frame) < offset + 2:
        return None
    (ethertype,) = struct.unpack_from("!H", frame, offset)
    offset += 2
    if ethertype == _ETH_P_8021Q and len(frame) >= offset + 4:
        (ethertype,) = struct.unpack_from("!H", frame, offset + 2)
        offset += 4
    if ethertype != _ETH_P_IP or len(frame) < offset + 20:
        return None
    ver_ihl, proto = frame[offset], frame[offset + 9]
    total_len, frag = struct.unpack_from("!H2xH", frame, offset + 2)
    ihl = (ver_ihl & 0x0F) * 4
    if ver_ihl >> 4 != 4 or proto != _IPPROTO_TCP or ihl < 20 or frag & 0x1FFF:
        return None  # not IPv4 TCP, or a non-first fragment (no TCP header)
    src, dst = _ip(frame[offset + 12:offset + 16]), _ip(frame[offset + 16:offset + 20])
    tcp = offset + ihl
    if len(frame) < tcp + 20:
        return None
    sport, dport, seq, ack, off_flags = struct.unpack_from("!HHIIH", frame, tcp)
    doff = (off_flags >> 12) * 4
    if total_len == 0 and wire_len is not None:
        total_len = wire_len - offset
    payload = max(0, total_len - ihl - doff)
    return TcpSegment(ts_ns, src, sport, dst, dport, seq, ack, off_flags & 0x3F, payload)


def _unwrap(value: int, last: int) -> int:
    """The 64-bit number nearest to `last` whose low 32 bits are `value`."""
    delta = (value - last) % _MOD
    if delta >= _MOD // 2:
        delta -= _MOD
    return last + delta


@dataclass
class _Direction:
    key: tuple[str, int, str, int]
    first_ns: int
    last_ns: int = 0
    bytes: int = 0
    packets: int = 0
    retransmissions: int = 0
    snd_max: int | None = None  # highest unwrapped sequence end sent (SYN/FIN count one)
    pending: deque = field(default_factory=deque)  # (end_seq, start_seq, ts_ns) of first transmissions
    rtts_ns: list[int] = field(default_factory=list)

    def seq(self, raw: int) -> int:
        return raw if self.snd_max is None else _unwrap(raw, self.snd_max)


def _send(d: _Direction, seg: TcpSegment) -> None:
    start = d.seq(seg.seq)
    end = start + seg.payload_bytes + (1 if seg.flags & TCP_SYN else 0) + (1 if seg.flags & TCP_FIN else 0)
    if seg.payload_bytes > 0 and d.snd_max is not None and start < d.snd_max:
        d.retransmissions += 1
        # Karn: an ACK may now answer either copy, so no segment overlapping this range gives a sample
        d.pending = deque(p for p in d.pending if not (p[1] < end and start < p[0]))
    elif seg.payload_bytes > 0:
        d.pending.append((start + seg.payload_bytes, start, seg.ts_ns))
    if d.snd_max is None or end > d.snd_max:
        d.snd_max = end


def _acknowledge(d: _Direction, seg: TcpSegment) -> None:
    """`seg` (of the reverse direction) acknowledges data of `d`: RTT samples for what it covers."""
    if d.snd_max is None:
        return
    ack = _unwrap(seg.ack, d.snd_max)
    while d.pending and d.pending[0][0] <= ack:
        _end, _start, sent_ns = d.pending.popleft()
        d.rtts_ns.append(seg.ts_ns - sent_ns)


def analyze_flows(segments: Iterable[TcpSegment]) -> list[FlowStats]:
    """Per-direction statistics of `segments` (in capture order, read once: a generator streams a large
    capture), in order of each direction's first packet."""
    directions: dict[tuple[str, int, str, int], _Direction] = {}
    for seg in segments:
        d = directions.get(seg.key)
        if d is None:
            d = directions[seg.key] = _Direction(seg.key, seg.ts_ns)
        d.packets += 1
        d.bytes += seg.payload_bytes
        d.last_ns = seg.ts_ns
        _send(d, seg)
        if seg.flags & TCP_ACK:
            reverse = directions.get(seg.reverse_key)
            if reverse is not None:
                _acknowledge(reverse, seg)
    return [FlowStats(*d.key, bytes=d.bytes, packets=d.packets, retransmissions=d.retransmissions,
                      rtt_samples=len(d.rtts_ns),
                      rtt_median_us=statistics.median(d.rtts_ns) / 1e3 if d.rtts_ns else None,
                      first_ns=d.first_ns, last_ns=d.last_ns)
            for d in directions.values()]


__all__ = ["TcpSegment", "FlowStats", "decode_ethernet_frame", "analyze_flows",
           "TCP_FIN", "TCP_SYN", "TCP_RST", "TCP_PSH", "TCP_ACK"]
