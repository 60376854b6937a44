"""Network diagnosis from a pairwise measurement matrix (pure).

Input: for every ordered host pair, the measured latency of a small message and the bandwidth of a large
one (latency is measured with an exchange, so it is the same for both directions of a pair; a delayed link
then shows up as both of its directions). A pair is *slow* when its bandwidth falls short of what its path should give (the slowest
configured link rate on the path x the TCP payload share, when links are shaped) or of the median of pairs
with the same expectation, or when its latency exceeds the median of pairs with the same hop count and
configured delay by more than a margin. Suspect links are then found as the smallest set of link
directions that explains every slow pair (greedy cover, preferring the link direction whose pairs are all
slow); a host is flagged when every pair it sends from, or every pair it receives at, is slow.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Mapping

from genie.core.topology import Topology
from genie.topology.routing import shortest_paths_next_hops

TCP_PAYLOAD_SHARE = 1448 / 1514  # MSS over the Ethernet frame with TCP timestamps


@dataclass(frozen=True)
class PairMeasurement:
    src: str
    dst: str
    latency_us: float
    bandwidth_GBps: float


@dataclass(frozen=True)
class PairVerdict:
    measurement: PairMeasurement
    expected_bandwidth_GBps: float | None
    expected_delay_us: float
    reference_latency_us: float
    reference_bandwidth_GBps: float
    slow_bandwidth: bool
    slow_latency: bool

    @property
    def flagged(self) -> bool:
        return self.slow_bandwidth or self.slow_latency


@dataclass(frozen=True)
class LinkDirection:
    link_index: int
    src: str
    dst: str

    def label(self) -> str:
        return f"{self.src}->{self.dst}"


@dataclass(frozen=True)
class Diagnosis:
    pairs: tuple[PairVerdict, ...]
    suspect_links: tuple[LinkDirection, ...]
    suspect_hosts: tuple[str, ...]

    @property
    def flagged(self) -> bool:
        return bool(self.suspect_links or self.suspect_hosts or any(p.flagged for p in self.pairs))

    @property
    def suspect_link_indices(self) -> tuple[int, ...]:
        return tuple(sorted({d.link_index for d in self.suspect_links}))


def path_links(topology: Topology, src: str, dst: str) -> frozenset[LinkDirection]:
    """Every link direction on any shortest (ECMP) path from host `src` to host `dst`."""
    hops = shortest_paths_next_hops(topology)
    index = {frozenset((l.a, l.b)): i for i, l in enumerate(topology.links)}
    out: set[LinkDirection] = set()
    frontier = {src}
    while frontier:
        nxt: set[str] = set()
        for node in frontier:
            if node == dst:
                continue
            for hop in hops.get((node, dst), ()):
                out.add(LinkDirection(index[frozenset((node, hop))], node, hop))
                nxt.add(hop)
        frontier = nxt
    return frozenset(out)


def _expected(topology: Topology, links: frozenset[LinkDirection]) -> tuple[float | None, float]:
    shapes = [topology.links[d.link_index].shape for d in links]
    rates = [s.rate_bps for s in shapes]
    bw = None if not rates or any(r is None for r in rates) else min(rates) / 8 / 1e9 * TCP_PAYLOAD_SHARE
    return bw, sum(s.delay_us for s in shapes)


def diagnose(topology: Topology, measurements: Mapping[tuple[str, str], PairMeasurement], *,
             bandwidth_tolerance: float = 0.25, latency_margin_us: float = 500.0,
             latency_factor: float = 1.5) -> Diagnosis:
    """Judge every pair against its expectation and its peers; find the links and hosts that explain it."""
    paths = {pair: path_links(topology, *pair) for pair in measurements}
    expect = {pair: _expected(topology, links) for pair, links in paths.items()}
    by_class: dict[tuple, list[PairMeasurement]] = {}
    for pair, m in measurements.items():
        by_class.setdefault((expect[pair][0], expect[pair][1], len(paths[pair])), []).append(m)
    verdicts = []
    for pair, m in measurements.items():
        bw_expected, delay_us = expect[pair]
        peers = by_class[(bw_expected, delay_us, len(paths[pair]))]
        ref_bw = median(p.bandwidth_GBps for p in peers)
        ref_lat = median(p.latency_us for p in peers)
        floor = (1 - bandwidth_tolerance) * (min(ref_bw, bw_expected) if bw_expected else ref_bw)
        slow_bw = m.bandwidth_GBps < floor
        slow_lat = m.latency_us > max(ref_lat * latency_factor, ref_lat + latency_margin_us)
        verdicts.append(PairVerdict(m, bw_expected, delay_us, ref_lat, ref_bw, slow_bw, slow_lat))
    slow = {(v.measurement.src, v.measurement.dst) for v in verdicts if v.flagged}
    links = _cover(paths, slow)
    hosts = _hosts(measurements, slow)
    return Diagnosis(tuple(verdicts), links, hosts)


def _cover(paths: Mapping[tuple[str, str], frozenset[LinkDirection]],
           slow: set[tuple[str, str]]) -> tuple[LinkDirection, ...]:
    users: dict[LinkDirection, set[tuple[str, str]]] = {}
    for pair, links in paths.items():
        for d in links:
            users.setdefault(d, set()).add(pair)
    uncovered = set(slow)
    chosen: list[LinkDirection] = []
    while uncovered:
        def score(d: LinkDirection) -> tuple[int, float, int]:
            pairs = users[d]
            explained = len(pairs & uncovered)
            purity = len(pairs & slow) / len(pairs)
            return (explained > 0 and purity >= 0.5, purity * explained, -d.link_index)

        best = max(users, key=score)
        if not score(best)[0]:
            break  # what is left is not explained by any link: scattered noise, left to the pair verdicts
        chosen.append(best)
        uncovered -= users[best]
    return tuple(sorted(chosen, key=lambda d: (d.link_index, d.src)))


def _hosts(measurements: Mapping[tuple[str, str], PairMeasurement], slow: set[tuple[str, str]]) -> tuple[str, ...]:
    hosts = sorted({h for pair in measurements for h in pair})
    flagged = []
    for h in hosts:
        sending = [p for p in measurements if p[0] == h]
        receiving = [p for p in measurements if p[1] == h]
        if (sending and all(p in slow for p in sending)) or (receiving and all(p in slow for p in receiving)):
            flagged.append(h)
    return tuple(flagged) if len(flagged) < len(hosts) else ()
