"""Link and TCP counters → per-direction traffic, drops and retransmissions (pure).

Inputs are counter snapshots taken before and after a run (``genie.testbed.netlink.link_counters``: one
`LinkCounters` per link end, whose TX is the direction end.node -> end.peer) and the text of
``/proc/net/snmp`` / ``/proc/net/dev`` read inside each testbed namespace. Nothing here reads the kernel.

A link direction src -> dst is measured at the src end: its TX bytes/packets, its TX drops and its root qdisc
drops (shaping is on egress); the dst end adds its RX drops. Counters that went backwards (an interface
re-created between the snapshots) give a delta of 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol, Sequence


class _End(Protocol):
    link_index: int
    node: str
    peer: str
    netns: str | None
    ifname: str


class _Counters(Protocol):
    """What `genie.testbed.observed.LinkCounters` provides (kept structural: measure imports no testbed)."""

    end: _End
    tx_bytes: int
    tx_packets: int
    tx_drops: int
    rx_bytes: int
    rx_packets: int
    rx_drops: int
    qdisc_drops: int


@dataclass(frozen=True)
class LinkDirectionTraffic:
    """Traffic of one link direction src -> dst between two snapshots."""

    link_index: int
    src: str
    dst: str
    netns: str | None  # the src end's namespace
    ifname: str  # the src end's interface
    rate_bps: int | None  # the topology's shaped rate for this direction, None = unshaped
    duration_s: float
    bytes: int
    packets: int
    tx_drops: int
    rx_drops: int | None  # None when the dst end is not observed
    qdisc_drops: int

    @property
    def mean_rate_bps(self) -> float:
        return self.bytes * 8 / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def utilisation_pct(self) -> float | None:
        """Mean rate over the whole run as a percentage of the shaped rate (None if unshaped)."""
        if not self.rate_bps:
            return None
        return 100.0 * self.mean_rate_bps / self.rate_bps


@dataclass(frozen=True)
class TcpCounters:
    """The ``Tcp:`` line of /proc/net/snmp of one namespace (segments, resets)."""

    active_opens: int = 0
    passive_opens: int = 0
    in_segs: int = 0
    out_segs: int = 0
    retrans_segs: int = 0
    in_errs: int = 0
    out_rsts: int = 0


@dataclass(frozen=True)
class NamespaceTcp:
    """TCP activity of one namespace (a testbed host) between two snapshots."""

    netns: str
    host: str
    counters: TcpCounters

    @property
    def retrans_pct(self) -> float:
        out = self.counters.out_segs
        return 100.0 * self.counters.retrans_segs / out if out else 0.0


@dataclass(frozen=True)
class LinkRateSample:
    """Bytes sent in one direction during one sampling interval [t_start_s, t_end_s) after the run start."""

    t_start_s: float
    t_end_s: float
    link_index: int
    src: str
    dst: str
    bytes: int

    @property
    def rate_bps(self) -> float:
        span = self.t_end_s - self.t_start_s
        return self.bytes * 8 / span if span > 0 else 0.0


def _delta(after: int, before: int) -> int:
    return max(0, int(after) - int(before))


def _key(end: _End) -> tuple[int, str, str]:
    return (end.link_index, end.node, end.peer)


def diff_link_counters(before: Sequence[_Counters], after: Sequence[_Counters], *, duration_s: float,
                       rates_bps: Mapping[int, int | None] | None = None) -> list[LinkDirectionTraffic]:
    """One row per link direction observed in both snapshots, in `after` order. `rates_bps` maps a topology
    link index to its shaped rate (the same in both directions)."""
    old = {_key(c.end): c for c in before}
    now = {_key(c.end): c for c in after}
    rates = rates_bps or {}
    out = []
    for c in after:
        k = _key(c.end)
        if k not in old:
            continue
        b = old[k]
        peer_key = (c.end.link_index, c.end.peer, c.end.node)
        rx_drops = (_delta(now[peer_key].rx_drops, old[peer_key].rx_drops)
                    if peer_key in now and peer_key in old else None)
        out.append(LinkDirectionTraffic(
            link_index=c.end.link_index, src=c.end.node, dst=c.end.peer, netns=c.end.netns, ifname=c.end.ifname,
            rate_bps=rates.get(c.end.link_index), duration_s=duration_s,
            bytes=_delta(c.tx_bytes, b.tx_bytes), packets=_delta(c.tx_packets, b.tx_packets),
            tx_drops=_delta(c.tx_drops, b.tx_drops), rx_drops=rx_drops,
            qdisc_drops=_delta(c.qdisc_drops, b.qdisc_drops)))
    return out


_SNMP_FIELDS = {"ActiveOpens": "active_opens", "PassiveOpens": "passive_opens", "InSegs": "in_segs",
                "OutSegs": "out_segs", "RetransSegs": "retrans_segs", "InErrs": "in_errs", "OutRsts": "out_rsts"}


def parse_snmp_tcp(text: str) -> TcpCounters:
    """The ``Tcp:`` header/value line pair of /proc/net/snmp. Missing fields count as 0."""
    lines = [line.split() for line in text.splitlines() if line.startswith("Tcp:")]
    if len(lines) < 2:
        raise ValueError("no Tcp: lines in /proc/net/snmp text")
    values = dict(zip(lines[0][1:], lines[1][1:]))
    return TcpCounters(**{attr: int(values.get(name, 0)) for name, attr in _SNMP_FIELDS.items()})


def diff_tcp(before: TcpCounters, after: TcpCounters) -> TcpCounters:
    return TcpCounters(**{attr: _delta(getattr(after, attr), getattr(before, attr)) for attr in _SNMP_FIELDS.values()})


def parse_proc_net_dev(text: str) -> dict[str, tuple[int, int]]:
    """/proc/net/dev → {ifname: (rx_bytes, tx_bytes)}."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        if ":" not in line or "|" in line:
            continue
        name, rest = line.split(":", 1)
        fields = rest.split()
        if len(fields) >= 9:
            out[name.strip()] = (int(fields[0]), int(fields[8]))
    return out


def rate_samples(ends: Iterable[_End], snapshots: Sequence[tuple[float, Mapping[tuple[str, str], int]]]
                 ) -> list[LinkRateSample]:
    """Per-interval bytes of each link direction from periodic TX byte snapshots.

    `snapshots`: (t_s since the run start, {(netns, ifname): tx_bytes}) in time order; an end missing from
    either side of an interval is skipped for that interval."""
    ends = list(ends)
    out = []
    for (t0, a), (t1, b) in zip(snapshots, snapshots[1:]):
        for end in ends:
            k = (end.netns or "", end.ifname)
            if k in a and k in b:
                out.append(LinkRateSample(round(t0, 6), round(t1, 6), end.link_index, end.node, end.peer,
                                          _delta(b[k], a[k])))
    return out


@dataclass(frozen=True)
class TcpSockets:
    """A host's established TCP connections at one moment (sock_diag in its namespace): how many, their
    congestion windows (segments) and smoothed RTTs (ms)."""

    host: str
    count: int
    cwnd_mean: float
    cwnd_min: int
    rtt_ms_mean: float
    rtt_ms_max: float


class TcpConnectionLike(Protocol):
    """What `genie.testbed.observed.TcpConnectionInfo` provides (structural: measure imports no testbed)."""

    cwnd_segments: int
    srtt_us: int


def tcp_sockets(host: str, connections: Iterable[TcpConnectionLike]) -> TcpSockets:
    """A host's established connections (sock_diag's tcp_info, what ``ss -tin`` prints) -> their count, mean
    and least congestion window and mean and largest smoothed RTT."""
    found = list(connections)
    if not found:
        return TcpSockets(host, 0, 0.0, 0, 0.0, 0.0)
    cwnds = [c.cwnd_segments for c in found]
    rtts_ms = [c.srtt_us / 1e3 for c in found]
    return TcpSockets(host, len(found), sum(cwnds) / len(cwnds), min(cwnds), sum(rtts_ms) / len(rtts_ms),
                      max(rtts_ms))
