"""The peers harness's report, as pure functions: per-system nccl-tests tables, genie/peer ratios, the targets of
issue #8 (item 2) with pass/fail, and peers.csv. No processes, no root, no torch.

Every measurement is a `Row`: one system (genie, gloo, mpi), one link shape (shaped = every link 1 Gbit/s HTB,
unshaped = no qdisc), one collective and size. Times are medians over the timed iterations; algbw/busbw follow
nccl-tests (`genie.collectives.busbw`), GB = 1e9 bytes.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from genie.collectives.busbw import busbw_factor
from genie.core.collective import Collective
from genie.measure.diagnose import TCP_PAYLOAD_SHARE
from genie.measure.metrics import CaseStats

GENIE = "genie"
GLOO = "gloo"
MPI = "mpi"
SYSTEMS = (GENIE, GLOO, MPI)
PEERS = (GLOO, MPI)
COLLECTIVES = (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.ALL_TO_ALL)
DTYPE = "float"  # float32 everywhere, as genie bench
DTYPE_BYTES = 4
KIB = 1024
MIB = 1024 * 1024
SHAPED_RATE_BPS = 1_000_000_000
SCALE_RATE_BPS = 100_000_000
CSV_COLUMNS = ("system", "shaped", "collective", "size_bytes", "time_us", "algbw", "busbw", "iterations")


def payload_limit_GBps(rate_bps: int) -> float:
    """What TCP payload can carry over a link of `rate_bps` (1448 payload bytes per 1514-byte frame)."""
    return rate_bps / 8e9 * TCP_PAYLOAD_SHARE


def shape_label(shaped: bool) -> str:
    return "1 Gbit/s HTB" if shaped else "unshaped"


@dataclass(frozen=True)
class Row:
    system: str
    shaped: bool
    collective: Collective
    size_bytes: int
    time_us: float
    algbw: float
    busbw: float
    iterations: int

    @property
    def count(self) -> int:
        return self.size_bytes // DTYPE_BYTES


def row_from_stats(system: str, shaped: bool, stats: CaseStats) -> Row:
    return Row(system=system, shaped=shaped, collective=stats.collective, size_bytes=stats.size_bytes,
               time_us=stats.time_us, algbw=stats.algbw_GBps, busbw=stats.busbw_GBps,  # one time: the mean
               iterations=stats.iterations)


def row_from_time(system: str, shaped: bool, collective: Collective, ranks: int, size_bytes: int,
                  time_us: float, iterations: int) -> Row:
    """A row from a median time (genie's sweep.csv gives algbw/busbw too; this recomputes them the same way)."""
    algbw = size_bytes / (time_us * 1e3) if time_us > 0 else 0.0
    return Row(system=system, shaped=shaped, collective=collective, size_bytes=size_bytes, time_us=time_us,
               algbw=algbw, busbw=algbw * busbw_factor(collective, ranks), iterations=iterations)


@dataclass(frozen=True)
class FlowLimit:
    """What `len(per_flow_GBps)` simultaneous TCP flows in a ring (rank i -> i+1) reached, per flow."""

    shaped: bool
    per_flow_GBps: tuple[float, ...]
    retrans_segs: int | None = None  # TCP retransmissions of the flows' senders while they ran
    other_means_GBps: tuple[float, ...] = ()  # the per-flow means of the other measurements of this shape

    @property
    def mean_GBps(self) -> float:
        return sum(self.per_flow_GBps) / len(self.per_flow_GBps) if self.per_flow_GBps else 0.0

    @property
    def min_GBps(self) -> float:
        return min(self.per_flow_GBps, default=0.0)

    @property
    def max_GBps(self) -> float:
        return max(self.per_flow_GBps, default=0.0)


def best_flow_limit(limits: Sequence[FlowLimit]) -> FlowLimit | None:
    """Of several measurements of one shape (before and after the systems ran: the load changes), the one
    with the highest per-flow mean, which also lists the other means."""
    if not limits:
        return None
    best = max(limits, key=lambda f: f.mean_GBps)
    others = tuple(f.mean_GBps for f in limits if f is not best)
    return FlowLimit(best.shaped, best.per_flow_GBps, best.retrans_segs, others)


@dataclass(frozen=True)
class ScaleResult:
    """The --scale run: genie all-reduce on a star of `ranks` hosts at `rate_bps`, and rank RSS samples."""

    ranks: int
    rate_bps: int
    rows: tuple[Row, ...]
    completed: bool
    max_rss_kib: int
    rss_samples: int
    error: str | None = None


def find(rows: Iterable[Row], system: str, shaped: bool, collective: Collective, size_bytes: int) -> Row | None:
    for r in rows:
        if (r.system, r.shaped, r.collective, r.size_bytes) == (system, shaped, collective, size_bytes):
            return r
    return None


def format_size(size_bytes: int) -> str:
    for unit, div in (("G", 1 << 30), ("M", MIB), ("K", KIB)):
        if size_bytes >= div and size_bytes % div == 0:
            return f"{size_bytes // div}{unit}"
    return str(size_bytes)


def format_system_table(rows: Sequence[Row], system: str, shaped: bool, ranks: int, label: str | None = None) -> str:
    """nccl-tests' layout, one block per collective: size, count, type, redop, time, algbw, busbw."""
    label = label or shape_label(shaped)
    mine = [r for r in rows if r.system == system and r.shaped == shaped]
    if not mine:
        return f"# {system}, {label}: nothing measured"
    header = f"#{'size':>12} {'count':>12} {'type':>6} {'redop':>6} {'time':>12} {'algbw':>8} {'busbw':>8} {'iters':>6}"
    units = f"#{'(B)':>12} {'(elements)':>12} {'':>6} {'':>6} {'(us)':>12} {'(GB/s)':>8} {'(GB/s)':>8} {'':>6}"
    lines: list[str] = []
    for collective in _collectives(mine):
        if lines:
            lines.append("")
        lines += [f"# {system} {collective.value}, {ranks} ranks, {label}", header, units]
        for r in sorted((r for r in mine if r.collective is collective), key=lambda r: r.size_bytes):
            redop = "sum" if collective is Collective.ALL_REDUCE else "none"
            lines.append(f" {r.size_bytes:>12} {r.count:>12} {DTYPE:>6} {redop:>6} {r.time_us:>12.1f} "
                         f"{r.algbw:>8.4f} {r.busbw:>8.4f} {r.iterations:>6}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Ratio:
    """genie against one peer for one case: time ratio (genie/peer, < 1 means genie is faster) and busbw ratio
    (genie/peer, > 1 means genie is faster)."""

    shaped: bool
    collective: Collective
    size_bytes: int
    peer: str
    time_ratio: float
    busbw_ratio: float


def ratios(rows: Sequence[Row]) -> list[Ratio]:
    """Every case genie and a peer both measured."""
    out: list[Ratio] = []
    for g in rows:
        if g.system != GENIE:
            continue
        for peer in PEERS:
            p = find(rows, peer, g.shaped, g.collective, g.size_bytes)
            if p is None or p.time_us <= 0 or p.busbw <= 0:
                continue
            out.append(Ratio(shaped=g.shaped, collective=g.collective, size_bytes=g.size_bytes, peer=peer,
                             time_ratio=g.time_us / p.time_us, busbw_ratio=g.busbw / p.busbw))
    return out


def format_ratio_table(rows: Sequence[Row], shaped: bool) -> str:
    """Per collective and size: genie/gloo and genie/MPI, time ratio and busbw ratio ('-' where not measured)."""
    by_case = {(r.collective, r.size_bytes, r.peer): r for r in ratios(rows) if r.shaped == shaped}
    genie_rows = [r for r in rows if r.system == GENIE and r.shaped == shaped]
    if not genie_rows:
        return f"# ratios, {shape_label(shaped)}: genie not measured"
    lines = [f"# genie / peer, {shape_label(shaped)} (time ratio < 1 and busbw ratio > 1: genie is faster)",
             f"#{'collective':>11} {'size':>6} {'t genie/gloo':>13} {'bw genie/gloo':>14} "
             f"{'t genie/mpi':>12} {'bw genie/mpi':>13}"]
    for collective in _collectives(genie_rows):
        for g in sorted((r for r in genie_rows if r.collective is collective), key=lambda r: r.size_bytes):
            cells = []
            for peer in PEERS:
                r = by_case.get((collective, g.size_bytes, peer))
                cells += ["-", "-"] if r is None else [f"{r.time_ratio:.3f}", f"{r.busbw_ratio:.3f}"]
            lines.append(f" {collective.value:>11} {format_size(g.size_bytes):>6} {cells[0]:>13} {cells[1]:>14} "
                         f"{cells[2]:>12} {cells[3]:>13}")
    return "\n".join(lines)


def format_flow_limit(limit: FlowLimit) -> str:
    flows = " ".join(f"{v:.4f}" for v in limit.per_flow_GBps)
    return (f"# {len(limit.per_flow_GBps)} simultaneous TCP flows rank i -> i+1, {shape_label(limit.shaped)}: "
            f"per flow mean {limit.mean_GBps:.4f} GB/s (min {limit.min_GBps:.4f}, max {limit.max_GBps:.4f}; "
            f"flows: {flows})" + ("" if limit.retrans_segs is None else
                                  f"; {limit.retrans_segs} TCP retransmissions")
            + ("" if not limit.other_means_GBps else
               "; best of {} measurements, the other per-flow means: {}".format(
                   len(limit.other_means_GBps) + 1, " ".join(f"{v:.4f}" for v in limit.other_means_GBps))))


class Verdict:
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_RUN = "not run"


@dataclass(frozen=True)
class Target:
    name: str
    measured: str
    required: str
    verdict: str


@dataclass(frozen=True)
class _Need:
    """measured >= factor x reference (or <= for `at_most`)."""

    measured: float | None
    reference: float | None
    factor: float = 1.0
    at_most: bool = False
    unit: str = "GB/s"
    reference_label: str = ""


def _judge(name: str, need: _Need) -> Target:
    fmt = (lambda v: f"{v:.1f} us") if need.unit == "us" else (lambda v: f"{v:.4f} {need.unit}")
    relation = "<=" if need.at_most else ">="
    scale = "" if need.factor == 1.0 else f"{need.factor:g} x "
    if need.reference is None:
        return Target(name, "-" if need.measured is None else fmt(need.measured),
                      f"{relation} {scale}{need.reference_label} (not measured)", Verdict.NOT_RUN)
    required = f"{relation} {scale}{need.reference_label} = {fmt(need.factor * need.reference)}"
    if need.measured is None:
        return Target(name, "-", required, Verdict.NOT_RUN)
    bound = need.factor * need.reference
    ok = need.measured <= bound if need.at_most else need.measured >= bound
    return Target(name, fmt(need.measured), required, Verdict.PASS if ok else Verdict.FAIL)


def _busbw(rows: Sequence[Row], system: str, shaped: bool, collective: Collective, size: int) -> float | None:
    r = find(rows, system, shaped, collective, size)
    return None if r is None else r.busbw


def _time(rows: Sequence[Row], system: str, shaped: bool, collective: Collective, size: int) -> float | None:
    r = find(rows, system, shaped, collective, size)
    return None if r is None else r.time_us


def targets(rows: Sequence[Row], unshaped_limit: FlowLimit | None, scale: ScaleResult | None = None, *,
            large: int = 64 * MIB, small: int = KIB, scale_large: int = 16 * MIB) -> list[Target]:
    """The targets of issue #8 item 2, each with its measured value and verdict ('not run' when a term is
    missing). all-gather / all-to-all are judged at the all-reduce target's size (`large`)."""
    ar, ag, a2a = COLLECTIVES
    limit = payload_limit_GBps(SHAPED_RATE_BPS)
    big = format_size(large)
    out = [
        _judge(f"1G: {big} all_reduce busbw >= 0.119 GB/s",
               _Need(_busbw(rows, GENIE, True, ar, large), 0.119, reference_label="0.119 GB/s")),
        _judge(f"1G: {big} all_reduce busbw >= 1.0 x gloo",
               _Need(_busbw(rows, GENIE, True, ar, large), _busbw(rows, GLOO, True, ar, large),
                     reference_label="gloo")),
        _judge(f"1G: {big} all_gather busbw >= 0.95 x payload limit",
               _Need(_busbw(rows, GENIE, True, ag, large), limit, 0.95, reference_label="0.1196 GB/s")),
        _judge(f"1G: {big} all_to_all busbw >= 0.95 x payload limit",
               _Need(_busbw(rows, GENIE, True, a2a, large), limit, 0.95, reference_label="0.1196 GB/s")),
        _judge(f"1G: {format_size(small)} all_reduce latency <= MPI",
               _Need(_time(rows, GENIE, True, ar, small), _time(rows, MPI, True, ar, small), at_most=True,
                     unit="us", reference_label="MPI")),
        _judge(f"unshaped: {big} all_reduce busbw >= 0.9 x per-flow limit",
               _Need(_busbw(rows, GENIE, False, ar, large),
                     None if unshaped_limit is None or not unshaped_limit.per_flow_GBps else unshaped_limit.mean_GBps,
                     0.9, reference_label="per-flow limit")),
        _judge(f"unshaped: {big} all_reduce busbw >= 1.0 x gloo",
               _Need(_busbw(rows, GENIE, False, ar, large), _busbw(rows, GLOO, False, ar, large),
                     reference_label="gloo")),
        _judge(f"unshaped: {big} all_reduce busbw >= 1.0 x MPI",
               _Need(_busbw(rows, GENIE, False, ar, large), _busbw(rows, MPI, False, ar, large),
                     reference_label="MPI")),
    ]
    out += scale_targets(scale, scale_large)
    return out


def scale_targets(scale: ScaleResult | None, scale_large: int = 16 * MIB) -> list[Target]:
    ranks = 64 if scale is None else scale.ranks
    rate = SCALE_RATE_BPS if scale is None else scale.rate_bps
    limit = payload_limit_GBps(rate)
    big = format_size(scale_large)
    sweep = f"scale: {ranks} ranks complete the 1K-{big} all_reduce sweep"
    bw = f"scale: {big} all_reduce busbw >= 0.9 x payload limit"
    rss = "scale: RSS per rank process <= 60 MB"
    if scale is None:
        return [Target(sweep, "-", "completed", Verdict.NOT_RUN),
                _judge(bw, _Need(None, limit, 0.9, reference_label=f"{limit:.4f} GB/s")),
                Target(rss, "-", "<= 60 MB", Verdict.NOT_RUN)]
    busbw = _busbw(scale.rows, GENIE, True, Collective.ALL_REDUCE, scale_large)
    rss_mb = scale.max_rss_kib * 1024 / 1e6
    sweep_t = Target(sweep, "completed" if scale.completed else f"failed: {scale.error or 'incomplete'}",
                     "completed", Verdict.PASS if scale.completed else Verdict.FAIL)
    if scale.rss_samples:
        rss_t = Target(rss, f"max {rss_mb:.1f} MB ({scale.rss_samples} samples)", "<= 60 MB",
                       Verdict.PASS if rss_mb <= 60 else Verdict.FAIL)
    else:
        rss_t = Target(rss, "-", "<= 60 MB", Verdict.NOT_RUN)
    return [sweep_t, _judge(bw, _Need(busbw, limit, 0.9, reference_label=f"{limit:.4f} GB/s")), rss_t]


def format_targets(items: Sequence[Target]) -> str:
    width = max((len(t.name) for t in items), default=10)
    lines = ["# targets (issue #8, item 2)",
             f"#  {'target':<{width}}  {'measured':>28}  {'required':<40} verdict"]
    for t in items:
        lines.append(f"   {t.name:<{width}}  {t.measured:>28}  {t.required:<40} {t.verdict}")
    passed = sum(t.verdict == Verdict.PASS for t in items)
    failed = sum(t.verdict == Verdict.FAIL for t in items)
    lines.append(f"# {passed} passed, {failed} failed, {len(items) - passed - failed} not run")
    return "\n".join(lines)


def peers_csv(rows: Sequence[Row]) -> str:
    """peers.csv, long format: one line per system, shape, collective and size."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        writer.writerow([r.system, "1" if r.shaped else "0", r.collective.value, r.size_bytes, f"{r.time_us:.3f}",
                         f"{r.algbw:.6f}", f"{r.busbw:.6f}", r.iterations])
    return out.getvalue()


def read_peers_csv(text: str) -> list[Row]:
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise ValueError(f"peers.csv: missing column {missing[0]!r}")
    return [Row(system=d["system"], shaped=d["shaped"] == "1", collective=Collective.parse(d["collective"]),
                size_bytes=int(d["size_bytes"]), time_us=float(d["time_us"]), algbw=float(d["algbw"]),
                busbw=float(d["busbw"]), iterations=int(d["iterations"])) for d in reader]


def full_report(rows: Sequence[Row], *, ranks: int, flow_limits: Mapping[bool, FlowLimit],
                scale: ScaleResult | None, header: Sequence[str] = (),
                losses: Mapping[bool, str] | None = None) -> str:
    """The whole printed report: header lines, per shape the flow limit, per-system tables and ratios (and
    ``losses[shaped]``: where genie loses and why, `benchmarks.peers.explain`), then the targets."""
    parts: list[str] = list(header)
    for shaped in (True, False):
        if not any(r.shaped == shaped for r in rows) and shaped not in flow_limits:
            continue
        parts.append(f"\n########## {shape_label(shaped)}, {ranks} ranks, star ##########")
        if shaped in flow_limits:
            parts.append(format_flow_limit(flow_limits[shaped]))
        for system in SYSTEMS:
            if any(r.system == system and r.shaped == shaped for r in rows):
                parts.append("")
                parts.append(format_system_table(rows, system, shaped, ranks))
        parts.append("")
        parts.append(format_ratio_table(rows, shaped))
        if losses and shaped in losses:
            parts += ["", losses[shaped]]
    if scale is not None:
        label = f"{scale.rate_bps / 1e6:g} Mbit/s HTB"
        parts.append(f"\n########## scale: {scale.ranks} ranks, star, {label} ##########")
        parts.append(format_system_table(scale.rows, GENIE, True, scale.ranks, label))
        if scale.rss_samples:
            parts.append(f"# rank RSS: max {scale.max_rss_kib * 1024 / 1e6:.1f} MB over {scale.rss_samples} samples")
    parts.append("")
    parts.append(format_targets(targets(rows, flow_limits.get(False), scale)))
    return "\n".join(parts) + "\n"


def markdown_summary(rows: Sequence[Row], flow_limits: Mapping[bool, FlowLimit]) -> str:
    """summary.md: per shape and collective, one Markdown table of median time and busbw per system, and the
    busbw ratios genie/gloo and genie/MPI (what benchmarks/README.md shows)."""
    parts: list[str] = []
    for shaped in (True, False):
        mine = [r for r in rows if r.shaped == shaped]
        if not mine:
            continue
        parts.append(f"**{shape_label(shaped)}**" + (
            f" — per-flow limit (8 flows i → i+1): {flow_limits[shaped].mean_GBps:.4f} GB/s"
            if shaped in flow_limits else ""))
        for collective in _collectives(mine):
            parts += ["", f"{collective.value} (time in us, busbw in GB/s)", "",
                      "| size | genie time | genie busbw | gloo time | gloo busbw | MPI time | MPI busbw "
                      "| busbw genie/gloo | busbw genie/MPI |", "|" + "---:|" * 9]
            for size in sorted({r.size_bytes for r in mine if r.collective is collective}):
                cells = [format_size(size)]
                for system in SYSTEMS:
                    r = find(mine, system, shaped, collective, size)
                    cells += ["-", "-"] if r is None else [f"{r.time_us:.0f}", f"{r.busbw:.4f}"]
                g = find(mine, GENIE, shaped, collective, size)
                for peer in PEERS:
                    p = find(mine, peer, shaped, collective, size)
                    cells.append("-" if g is None or p is None or p.busbw <= 0 else f"{g.busbw / p.busbw:.2f}")
                parts.append("| " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts) + "\n"


def _collectives(rows: Iterable[Row]) -> list[Collective]:
    return list(dict.fromkeys(r.collective for r in rows))
