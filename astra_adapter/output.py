"""ASTRA-sim's per-rank results: parse its stdout, print its lines, write ``estimate.csv``.

ASTRA-sim prints one block per rank when that rank finishes::

    [ts] [workload] [info] sys[0] finished, 64440 cycles, exposed communication 64440 cycles.
    [ts] [statistics] [info] sys[0], Wall time: 64440
    [ts] [statistics] [info] sys[0], Comm time: 64440
    [ts] [statistics] [info] sys[0], GPU time: 600000                        (only with compute nodes)
    [ts] [statistics] [info] sys[0], Total compute-communication overlap: 300000   (only when > 0)

1 cycle = 1 ns. The per-type lines ("CPU", "GPU", "Comm", "Remote mem", "Invalid") come in the order ASTRA-sim's
hash map happens to give; :class:`RankResult` keeps them in printed order.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from genie.core.errors import InputError
from genie.core.files import write_atomic

_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (-?\d+) cycles")
_STAT = re.compile(r"\[statistics\] \[info\] sys\[(\d+)\], ([A-Za-z][A-Za-z -]*?): (-?[0-9.]+%?)\s*$")
TYPE_LABELS = ("CPU", "GPU", "Comm", "Remote mem", "Replay", "Invalid")
UTILISATION_LABELS = ("Compute bound percentage", "Average compute utilization", "Average memory utilization",
                      "Average operation intensity")
CSV_COLUMNS = ("rank", "finish_cycles", "exposed_comm_cycles", "comm_time", "gpu_time", "overlap")


@dataclass(frozen=True)
class RankResult:
    """One rank's finish line and statistics (all times in cycles = ns)."""

    rank: int
    finish_cycles: int
    exposed_comm_cycles: int
    wall_time: int | None = None
    type_times: tuple[tuple[str, int], ...] = ()  # (label, cycles) in printed order, label in TYPE_LABELS
    overlap: int = 0
    utilisation: tuple[tuple[str, str], ...] = ()  # roofline lines: (label, printed value)

    def type_time(self, label: str) -> int:
        return next((v for k, v in self.type_times if k == label), 0)

    @property
    def comm_time(self) -> int:
        return self.type_time("Comm")

    @property
    def gpu_time(self) -> int:
        return self.type_time("GPU")

    @property
    def cpu_time(self) -> int:
        return self.type_time("CPU")


@dataclass(frozen=True)
class AstraResult:
    """All ranks, in the order they finished (the order ASTRA-sim prints them)."""

    ranks: tuple[RankResult, ...]

    def by_rank(self) -> tuple[RankResult, ...]:
        return tuple(sorted(self.ranks, key=lambda r: r.rank))

    @property
    def max_finish_cycles(self) -> int:
        return max(r.finish_cycles for r in self.ranks)

    @property
    def min_finish_cycles(self) -> int:
        return min(r.finish_cycles for r in self.ranks)

    @property
    def max_exposed_comm_cycles(self) -> int:
        return max(r.exposed_comm_cycles for r in self.ranks)

    @property
    def max_comm_time(self) -> int:
        return max(r.comm_time for r in self.ranks)

    @property
    def max_gpu_time(self) -> int:
        return max(r.gpu_time for r in self.ranks)

    @property
    def max_overlap(self) -> int:
        return max(r.overlap for r in self.ranks)


# ---- parsing -------------------------------------------------------------------------------------------
def parse_astra_output(data: bytes | str, *, source: str = "<stdout>") -> AstraResult:
    """Per-rank results from ASTRA-sim's stdout. No ``sys[N] finished`` line -> InputError."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else data
    finished: dict[int, tuple[int, int]] = {}
    order: list[int] = []
    stats: dict[int, dict] = {}
    for line in text.splitlines():
        m = _FINISHED.search(line)
        if m:
            rank = int(m.group(1))
            if rank not in finished:
                order.append(rank)
            finished[rank] = (int(m.group(2)), int(m.group(3)))
            continue
        m = _STAT.search(line)
        if not m:
            continue
        rank, label, value = int(m.group(1)), m.group(2).strip(), m.group(3)
        entry = stats.setdefault(rank, {"wall": None, "types": [], "overlap": 0, "util": []})
        if label == "Wall time":
            entry["wall"] = int(float(value))
        elif label.endswith(" time") and label[:-5] in TYPE_LABELS:
            entry["types"].append((label[:-5], int(float(value))))
        elif label == "Total compute-communication overlap":
            entry["overlap"] = int(float(value))
        elif label in UTILISATION_LABELS:
            entry["util"].append((label, value))
    if not finished:
        raise InputError("no 'sys[N] finished, X cycles, exposed communication Y cycles.' line found", source=source)
    ranks = []
    for rank in order:
        fin, exposed = finished[rank]
        entry = stats.get(rank, {"wall": None, "types": [], "overlap": 0, "util": []})
        ranks.append(RankResult(rank, fin, exposed, entry["wall"], tuple(entry["types"]), entry["overlap"],
                                tuple(entry["util"])))
    return AstraResult(tuple(ranks))


# ---- printing ASTRA-sim's lines ------------------------------------------------------------------------
def timestamp_now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def rank_lines(result: RankResult, timestamp: str | None = None) -> list[str]:
    """The block ASTRA-sim prints when ``result.rank`` finishes."""
    ts = timestamp or timestamp_now()
    sysname = f"sys[{result.rank}]"
    lines = [f"[{ts}] [workload] [info] {sysname} finished, {result.finish_cycles} cycles, "
             f"exposed communication {result.exposed_comm_cycles} cycles.",
             f"[{ts}] [statistics] [info] {sysname}. Post statistics processing start.",
             f"[{ts}] [statistics] [info] {sysname}. Post statistics processing end."]
    if result.wall_time is not None:
        lines.append(f"[{ts}] [statistics] [info] {sysname}, Wall time: {result.wall_time}")
    lines += [f"[{ts}] [statistics] [info] {sysname}, {label} time: {value}" for label, value in result.type_times]
    if result.overlap > 0:
        lines.append(f"[{ts}] [statistics] [info] {sysname}, Total compute-communication overlap: {result.overlap}")
    lines += [f"[{ts}] [statistics] [info] {sysname}, {label}: {value}" for label, value in result.utilisation]
    return lines


def format_astra_output(result: AstraResult, *, preamble: tuple[str, ...] = (), timestamp: str | None = None) -> str:
    """ASTRA-sim's stdout for ``result``: preamble lines (already formatted), rank blocks, "Exiting"."""
    ts = timestamp or timestamp_now()
    lines = list(preamble)
    for rank in result.ranks:
        lines += rank_lines(rank, ts)
    lines.append(f"[{ts}] [system] [warning] Exiting")
    return "\n".join(lines) + "\n"


# ---- estimate.csv --------------------------------------------------------------------------------------
def estimate_csv(result: AstraResult) -> bytes:
    """``rank,finish_cycles,exposed_comm_cycles,comm_time,gpu_time,overlap``, one row per rank in rank order."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in result.by_rank():
        writer.writerow((r.rank, r.finish_cycles, r.exposed_comm_cycles, r.comm_time, r.gpu_time, r.overlap))
    return out.getvalue().encode()


def read_estimate_csv(data: bytes | str, *, source: str = "estimate.csv") -> AstraResult:
    text = data.decode() if isinstance(data, (bytes, bytearray)) else data
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != CSV_COLUMNS:
        raise InputError(f"expected columns {','.join(CSV_COLUMNS)}", source=source)
    ranks = []
    for line, row in enumerate(reader, start=2):
        try:
            values = {k: int(row[k]) for k in CSV_COLUMNS}
        except (TypeError, ValueError):
            raise InputError("expected integers", source=source, path=f"line {line}") from None
        types = tuple((label, values[key]) for label, key in (("Comm", "comm_time"), ("GPU", "gpu_time"))
                      if values[key])
        ranks.append(RankResult(values["rank"], values["finish_cycles"], values["exposed_comm_cycles"],
                                values["finish_cycles"], types, values["overlap"]))
    return AstraResult(tuple(ranks))


def write_estimate_csv(result: AstraResult, out_dir: str | Path) -> Path:
    return write_atomic(Path(out_dir) / "estimate.csv", estimate_csv(result))
