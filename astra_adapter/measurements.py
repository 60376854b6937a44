"""Measured collective latencies (bench ``sweep.csv``) and what a trace needs of them (pure).

A :class:`CommOp` is a communication node as the replay runs it (``genie.engine.program.collective_op``'s
conversion: all-gather's ``comm_size`` is the per-rank input, so the op moves ``comm_size x n``; all-gather,
reduce-scatter and all-to-all sizes round down to whole elements x group size; ``auto`` resolves per size the
way the replay and the bench do), so it names the same (collective, algorithm, ranks, size) as a bench row.
Sends become ``send_recv`` on 2 ranks (the bench's p2p case).

:class:`MeasurementTable` interpolates log-log in size between measured sizes of one curve and never beyond
them. A curve is (collective, algorithm, ranks); an op whose algorithm came from ``auto`` reads the *auto
curve* - the rows whose algorithm is what auto picks at their size - so it crosses algorithm switch points as
the replay does.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

from genie.collectives.registry import choose_algorithm
from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.files import InputKind, read_input
from genie.core.flowpath import PATHS_JSON, RunPaths
from genie.core.alltoallv import SplitMatrix, busiest_even_size, split_matrices
from genie.core.sizes import trace_op_size
from genie.core.trace import NodeKind, Trace, TraceNode

SWEEP_FILE = "sweep.csv"
DETAIL_FILE = "sweep_detail.csv"  # optional (genie experiment): the rank groups and iterations of each row
DETAIL_COLUMNS = ("collective", "algorithm", "ranks", "size_bytes", "groups", "iterations_us")


@dataclass(frozen=True, order=True)
class CommOp:
    collective: Collective
    algorithm: Algorithm
    ranks: int
    size_bytes: int
    auto: bool = False  # the algorithm was chosen by size (replay's Algorithm.AUTO)
    # an uneven all-to-all: bytes group position i sends position j (genie.core.alltoallv); size_bytes is then
    # the even all-to-all of its busiest member (busiest_even_size), what a measured curve is read at
    split_bytes: tuple[tuple[int, ...], ...] = ()

    def describe(self) -> str:
        how = "auto:" if self.auto else ""
        uneven = " (uneven: its busiest member's even equivalent)" if self.split_bytes else ""
        return (f"{self.collective.value}/{how}{self.algorithm.value} on {self.ranks} ranks, "
                f"{_size(self.size_bytes)}{uneven}")


@dataclass(frozen=True)
class Measurement:
    collective: Collective
    algorithm: Algorithm
    ranks: int
    size_bytes: int
    time_us: float  # per-op time: the median of a bench sweep, op_time_us of the iterations when known
    source: str = ""
    groups: tuple[tuple[int, ...], ...] = ()  # the rank groups that ran it at once (empty: ranks 0..n-1)
    iterations_us: tuple[float, ...] = ()


def _size(size_bytes: int) -> str:
    if size_bytes < 1024:
        return f"{size_bytes} B"
    return f"{size_bytes} B ({size_bytes / 2**20:.3f} MiB)" if size_bytes >= 2**20 else \
        f"{size_bytes} B ({size_bytes / 1024:.1f} KiB)"


def comm_op(node: TraceNode, trace: Trace, split_bytes: SplitMatrix = ()) -> CommOp | None:
    """The op the replay runs for ``node`` (None: not communication, or a 0-byte / 1-rank op that moves nothing).
    Mirrors ``genie.engine.program.collective_op`` (tests check they agree); ``split_bytes``: the node's split
    matrix when it is an uneven all-to-all (`trace_splits`)."""
    if node.kind is NodeKind.SEND:
        size = int(node.size_bytes or 0)
        return CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, size) if size else None
    if node.kind is not NodeKind.COLLECTIVE or node.comm_type is None:
        return None
    collective = node.comm_type.collective
    group = trace.group(node.process_group)
    if collective is None or collective is Collective.SEND_RECV or group is None:
        return None
    n = len(group.ranks)
    size, _ = trace_op_size(collective, int(node.size_bytes or 0), n)
    if split_bytes:
        size = busiest_even_size(split_bytes)
    if not size or n < 2:
        return None
    hint = node.algorithm or Algorithm.AUTO
    algorithm = choose_algorithm(collective, size, n) if hint is Algorithm.AUTO else hint
    return CommOp(collective, algorithm, n, size, auto=hint is Algorithm.AUTO, split_bytes=split_bytes)


def trace_splits(trace: Trace, orders: dict[int, tuple[TraceNode, ...]] | None = None
                 ) -> dict[tuple[int, int], SplitMatrix]:
    """{(rank, node id): split matrix} of the trace's uneven all-to-alls (genie.core.alltoallv); ``orders``:
    the ranks' nodes in topological order when the caller has them (``rank_orders``)."""
    return split_matrices(trace, orders)


def trace_comm_ops(trace: Trace) -> tuple[CommOp, ...]:
    """Every distinct op the trace's communication nodes run, sorted."""
    ops = set()
    splits = trace_splits(trace)
    for rank in trace.ranks:
        for node in rank.nodes:
            op = comm_op(node, trace, splits.get((rank.rank, node.id), ()))
            if op is not None:
                ops.add(op)
    return tuple(sorted(ops, key=lambda o: (o.collective.value, o.algorithm.value, o.ranks, o.size_bytes)))


def workload_weights(trace: Trace, measurements: tuple[Measurement, ...] | list[Measurement]) -> tuple[float, ...]:
    """Each measurement's weight in a calibration's fit (the fabric model's and ASTRA-sim's): 1, plus
    len(measurements) x its share of the workload's communication time (how often the trace's ranks run its
    op, times its measured time; 0 for an op the trace does not run). So the sweep as a whole and the workload's time count alike: a grid of small sizes cannot
    pull the fit away from the few large ops that make the iteration (measured: MoE EP8's 88 MB all-reduce
    ran 12% under the line rate in one sweep; the unweighted fit kept the line rate for the small sizes'
    sake, and the estimate came out 6.6% fast)."""
    def point(x: CommOp | Measurement) -> tuple:  # an op of the trace and a sweep row name it alike
        return x.collective, x.algorithm, x.ranks, x.size_bytes

    runs: dict[tuple, int] = {}
    splits = trace_splits(trace)
    for rank in trace.ranks:
        for node in rank.nodes:
            op = comm_op(node, trace, splits.get((rank.rank, node.id), ()))
            if op is not None:
                runs[point(op)] = runs.get(point(op), 0) + 1
    time = [runs.get(point(m), 0) * m.time_us for m in measurements]
    total = sum(time)
    return tuple(1.0 + len(time) * t / total if total > 0 else 1.0 for t in time)


# ---- sweep.csv ----------------------------------------------------------------------------------------
_REQUIRED = ("collective", "algorithm", "ranks", "size_bytes", "time_median_us")


def parse_sweep_csv(data: bytes | str, *, source: str = SWEEP_FILE) -> tuple[Measurement, ...]:
    text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else data
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in _REQUIRED if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)} (expected genie bench's sweep.csv)", source=source)
    rows = []
    for line, row in enumerate(reader, start=2):
        where = f"line {line}"
        try:
            collective = Collective.parse(row["collective"])
            algorithm = Algorithm.parse(row["algorithm"])
        except ValueError as exc:
            raise InputError(str(exc), source=source, path=where) from None
        try:
            ranks, size, t = int(row["ranks"]), int(row["size_bytes"]), float(row["time_median_us"])
        except (TypeError, ValueError):
            raise InputError("ranks, size_bytes and time_median_us must be numbers", source=source,
                             path=where) from None
        if ranks < 1 or size < 1 or not t > 0 or not math.isfinite(t):
            raise InputError(f"needs ranks >= 1, size_bytes >= 1 and time_median_us > 0, got {ranks}, {size}, {t}",
                             source=source, path=where)
        rows.append(Measurement(collective, algorithm, ranks, size, t, source))
    return tuple(rows)


def groups_text(groups: tuple[tuple[int, ...], ...]) -> str:
    return "|".join(" ".join(map(str, g)) for g in groups)


def op_time_us(iterations_us: tuple[float, ...] | list[float]) -> float:
    """One op's time from its iterations: the mean without the slowest and fastest 10%. Ops add up along a
    trace, so their *expected* times do; on a loaded machine iteration times are right-skewed and the median
    would undercount, while the trim drops rare stalls."""
    values = sorted(iterations_us)
    cut = len(values) // 10
    kept = values[cut:len(values) - cut] or values
    return sum(kept) / len(kept)


def detail_csv(measurements: tuple[Measurement, ...] | list[Measurement]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(DETAIL_COLUMNS)
    for m in measurements:
        writer.writerow((m.collective.value, m.algorithm.value, m.ranks, m.size_bytes, groups_text(m.groups),
                         " ".join(f"{t:.3f}" for t in m.iterations_us)))
    return out.getvalue()


def parse_detail_csv(data: bytes | str, *, source: str = DETAIL_FILE) -> dict[tuple, tuple]:
    """(collective, algorithm, ranks, size_bytes) -> (groups, iteration times in us)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else data
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != DETAIL_COLUMNS:
        raise InputError(f"expected columns {','.join(DETAIL_COLUMNS)}", source=source)
    found = {}
    for line, row in enumerate(reader, start=2):
        try:
            key = (Collective.parse(row["collective"]), Algorithm.parse(row["algorithm"]), int(row["ranks"]),
                   int(row["size_bytes"]))
            groups = tuple(tuple(int(x) for x in g.split()) for g in row["groups"].split("|") if g.strip())
            times = tuple(float(t) for t in row["iterations_us"].split())
        except (TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"bad row: {exc}", source=source, path=f"line {line}") from None
        if any(len(g) != key[2] for g in groups):
            raise InputError(f"groups must have {key[2]} ranks", source=source, path=f"line {line}")
        if any(not t > 0 for t in times):
            raise InputError("iteration times must be > 0", source=source, path=f"line {line}")
        found[key] = (groups, times)
    return found


def read_measurements(run_dirs: list[str | Path] | tuple) -> tuple[Measurement, ...]:
    """The rows of every run directory's sweep.csv (a directory or the sweep.csv itself): the median time, or
    - when the directory has a sweep_detail.csv (``genie experiment``) - the groups each row ran on and
    :func:`op_time_us` of its iterations."""
    if not run_dirs:
        raise InputError("no measurement run directory given", path="measurements")
    rows: list[Measurement] = []
    for entry in run_dirs:
        path = Path(entry)
        csv_path = path / SWEEP_FILE if path.is_dir() else path
        try:
            data = read_input(csv_path, InputKind.MEASUREMENTS)
        except InputError as exc:
            hint = " (expected a `genie bench` or `genie experiment` run directory)" if path.is_dir() else ""
            raise InputError(f"{exc.detail}{hint}", source=str(csv_path)) from None
        found = parse_sweep_csv(data, source=str(csv_path))
        detail_path = csv_path.with_name(DETAIL_FILE)
        if detail_path.is_file():
            detail = parse_detail_csv(read_input(detail_path, InputKind.MEASUREMENTS), source=str(detail_path))
            found = tuple(_detailed(m, detail.get((m.collective, m.algorithm, m.ranks, m.size_bytes))) for m in found)
        rows.extend(found)
    if not rows:
        raise InputError("no measurements in the sweep file(s)", source=", ".join(map(str, run_dirs)))
    return tuple(rows)


def read_run_paths(run_dirs: list[str | Path] | tuple) -> tuple[RunPaths | None, ...]:
    """Each run directory's ``paths.json`` (`genie.core.flowpath.RunPaths`: the paths its connections took on
    a testbed with equal-cost paths), None where it has none."""
    out: list[RunPaths | None] = []
    for entry in run_dirs:
        path = Path(entry)
        file = (path if path.is_dir() else path.parent) / PATHS_JSON
        out.append(RunPaths.parse(read_input(file, InputKind.RUN_FILE), source=str(file)) if file.is_file() else
                   None)
    return tuple(out)


def _detailed(m: Measurement, detail: tuple | None) -> Measurement:
    if detail is None:
        return m
    groups, times = detail
    return replace(m, groups=groups, iterations_us=times, time_us=op_time_us(times) if times else m.time_us)


# ---- interpolation ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Curve:
    sizes: tuple[int, ...]
    times_us: tuple[float, ...]

    def at(self, size_bytes: int) -> float | None:
        """Log-log interpolation; None outside [smallest, largest] size."""
        i = bisect.bisect_left(self.sizes, size_bytes)
        if i < len(self.sizes) and self.sizes[i] == size_bytes:
            return self.times_us[i]
        if i == 0 or i == len(self.sizes):
            return None
        s0, s1 = self.sizes[i - 1], self.sizes[i]
        t0, t1 = self.times_us[i - 1], self.times_us[i]
        f = (math.log(size_bytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
        return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))


def _curve(points: dict[int, list[float]]) -> Curve:
    sizes = tuple(sorted(points))
    return Curve(sizes, tuple(median(points[s]) for s in sizes))


class MeasurementTable:
    """Median time per (collective, algorithm, ranks, size); repeated rows (several run directories) are
    combined by their median."""

    def __init__(self, measurements: tuple[Measurement, ...] | list[Measurement]) -> None:
        fixed: dict[tuple, dict[int, list[float]]] = {}
        auto: dict[tuple, dict[int, list[float]]] = {}
        for m in measurements:
            fixed.setdefault((m.collective, m.algorithm, m.ranks), {}).setdefault(m.size_bytes, []).append(m.time_us)
            if choose_algorithm(m.collective, m.size_bytes, m.ranks) is m.algorithm or \
                    (m.collective is Collective.BROADCAST and m.algorithm is Algorithm.RING):
                auto.setdefault((m.collective, m.ranks), {}).setdefault(m.size_bytes, []).append(m.time_us)
        self._fixed = {k: _curve(v) for k, v in fixed.items()}
        self._auto = {k: _curve(v) for k, v in auto.items()}
        self.measurements = tuple(measurements)

    def curve(self, op: CommOp) -> Curve | None:
        if op.auto:
            return self._auto.get((op.collective, op.ranks))
        found = self._fixed.get((op.collective, op.algorithm, op.ranks))
        if found is None and op.collective is Collective.BROADCAST:
            other = Algorithm.RING if op.algorithm is Algorithm.PIPELINED_RING else Algorithm.PIPELINED_RING
            found = self._fixed.get((op.collective, other, op.ranks))
        return found

    def time_us(self, op: CommOp) -> float | None:
        curve = self.curve(op)
        return None if curve is None else curve.at(op.size_bytes)

    def missing(self, ops: tuple[CommOp, ...] | list[CommOp]) -> tuple[CommOp, ...]:
        return tuple(op for op in ops if self.time_us(op) is None)


def describe_missing(missing: tuple[CommOp, ...], table: MeasurementTable, *, limit: int = 6) -> str:
    """One line listing what is missing and what the measurements cover."""
    parts = []
    for op in missing[:limit]:
        curve = table.curve(op)
        have = "none measured" if curve is None else f"measured {_size(curve.sizes[0])}..{_size(curve.sizes[-1])}"
        parts.append(f"{op.describe()} ({have})")
    more = f" and {len(missing) - limit} more" if len(missing) > limit else ""
    commands = " ; ".join(bench_commands(missing))
    return (f"no measurement for {len(missing)} communication op(s) the trace needs: {'; '.join(parts)}{more} "
            f"(measure them: {commands}; then pass every run directory to --measurements; or pass --extrapolate "
            f"to use the calibrated model)")


def bench_commands(ops: tuple[CommOp, ...] | list[CommOp], *, target: str = "--topology TOPOLOGY.yaml") -> list[str]:
    """The `genie bench` command lines that measure `ops`: one per (collective, algorithm, ranks), its sizes
    from the smallest to the largest op (x2 steps, nccl-tests' sizes in bytes)."""
    groups: dict[tuple, list[int]] = {}
    for op in ops:
        algorithm = "auto" if op.auto else op.algorithm.value
        groups.setdefault((op.collective.value, algorithm, op.ranks), []).append(op.size_bytes)
    out = []
    for (collective, algorithm, ranks), sizes in groups.items():
        low, top = min(sizes), max(sizes)
        high = low
        while high < top:  # x2 steps from `low` up to the first size covering the largest op
            high *= 2
        factor = " -f 2" if high > low else ""
        out.append(f"genie bench {target} --ranks {ranks} --collective {collective} --algorithm {algorithm} "
                   f"-b {low} -e {high}{factor}")
    return out
