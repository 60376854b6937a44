"""`genie report compare A B`: what changed from run A to run B (pure, on loaded run directories).

bench runs: one row per (collective, size) measured in both — median time and busbw, their deltas.
replay runs: one row per communication op kind and size (median duration over ranks and iterations, from
ops.csv) and one row for the iteration time (replay.json's median). Deltas are B − A; % is relative to A.
Runs of different kinds never compare; different workloads (collective sets, trace digests) only with force.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from genie.core.errors import InputError
from genie.report.rundata import RunData, RunKind

COMPARE_COLUMNS = ("scope", "collective", "size_bytes", "time_a_us", "time_b_us", "time_delta_us", "time_delta_pct",
                   "busbw_a_GBps", "busbw_b_GBps", "busbw_delta_GBps", "busbw_delta_pct")


def _pct(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return 100.0 * (b - a) / a


@dataclass(frozen=True)
class CompareRow:
    scope: str  # case (bench), op (replay communication op kind and size), iteration (replay)
    collective: str
    size_bytes: int | None
    time_a_us: float
    time_b_us: float
    busbw_a_GBps: float | None = None
    busbw_b_GBps: float | None = None

    @property
    def time_delta_us(self) -> float:
        return self.time_b_us - self.time_a_us

    @property
    def time_delta_pct(self) -> float | None:
        return _pct(self.time_a_us, self.time_b_us)

    @property
    def busbw_delta_GBps(self) -> float | None:
        if self.busbw_a_GBps is None or self.busbw_b_GBps is None:
            return None
        return self.busbw_b_GBps - self.busbw_a_GBps

    @property
    def busbw_delta_pct(self) -> float | None:
        return _pct(self.busbw_a_GBps, self.busbw_b_GBps)

    @property
    def label(self) -> str:
        if self.scope == "iteration":
            return "iteration"
        return f"{self.collective} {self.size_bytes}B"


@dataclass(frozen=True)
class Comparison:
    kind: str
    run_a: str
    run_b: str
    rows: tuple[CompareRow, ...]
    notes: tuple[str, ...] = ()  # what differed and was compared anyway (--force), what was left out

    @property
    def iteration(self) -> CompareRow | None:
        return next((r for r in self.rows if r.scope == "iteration"), None)


def _check_comparable(a: RunData, b: RunData, force: bool) -> list[str]:
    if a.kind is not b.kind:
        raise InputError(f"cannot compare a {a.kind.value} run with a {b.kind.value} run", source=str(b.run_dir))
    if a.kind not in (RunKind.BENCH, RunKind.REPLAY):
        raise InputError(f"nothing to compare in a {a.kind.value} run (compare bench or replay runs)",
                         source=str(a.run_dir))
    notes = []
    if a.kind is RunKind.BENCH and set(a.collectives) != set(b.collectives):
        msg = (f"different workloads: collectives {','.join(a.collectives) or '-'} vs "
               f"{','.join(b.collectives) or '-'}")
        if not force:
            raise InputError(msg + " (use --force to compare what they share)", source=str(b.run_dir))
        notes.append(msg)
    if a.kind is RunKind.REPLAY:
        da, db = a.trace_digest, b.trace_digest
        if da != db:
            msg = f"different workloads: trace sha256 {(da or 'unknown')[:12]} vs {(db or 'unknown')[:12]}"
            if not force:
                raise InputError(msg + " (use --force to compare anyway)", source=str(b.run_dir))
            notes.append(msg)
    return notes


def _bench_rows(a: RunData, b: RunData) -> tuple[list[CompareRow], list[str]]:
    rows_b = {(r.collective, r.size_bytes): r for r in b.sweep}
    out = []
    for r in a.sweep:
        other = rows_b.get((r.collective, r.size_bytes))
        if other is not None:
            out.append(CompareRow("case", r.collective, r.size_bytes, r.time_median_us, other.time_median_us,
                                  r.busbw_GBps, other.busbw_GBps))
    only = len(a.sweep) + len(b.sweep) - 2 * len(out)
    return out, ([f"{only} (collective, size) rows are in one run only and are left out"] if only else [])


def _op_medians(run: RunData) -> dict[tuple[str, int], float]:
    if run.ops is None or run.ops.empty:
        return {}
    comm = run.ops[run.ops["type"].astype(str) != "compute"]
    durations = (comm["end_ns"] - comm["start_ns"]) / 1e3
    medians = durations.groupby([comm["type"].astype(str), comm["bytes"].astype(int)]).median()
    return {(str(k[0]), int(k[1])): float(v) for k, v in medians.items()}


def _replay_rows(a: RunData, b: RunData) -> list[CompareRow]:
    ops_a, ops_b = _op_medians(a), _op_medians(b)
    out = [CompareRow("op", kind, size, ops_a[(kind, size)], ops_b[(kind, size)])
           for kind, size in sorted(ops_a) if (kind, size) in ops_b]
    if a.replay and b.replay:
        out.append(CompareRow("iteration", "", None, a.replay["iteration_median_ns"] / 1e3,
                              b.replay["iteration_median_ns"] / 1e3))
    return out


def compare_runs(a: RunData, b: RunData, *, force: bool = False) -> Comparison:
    notes = _check_comparable(a, b, force)
    if a.kind is RunKind.BENCH:
        rows, more = _bench_rows(a, b)
        notes += more
    else:
        rows = _replay_rows(a, b)
    if not rows:
        raise InputError("the two runs have no measurement in common", source=f"{a.run_dir} vs {b.run_dir}")
    return Comparison(a.kind.value, str(a.run_dir), str(b.run_dir), tuple(rows), tuple(notes))


def _num(v: float | None, digits: int = 3) -> object:
    return "" if v is None else round(v, digits)


def compare_csv(c: Comparison) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COMPARE_COLUMNS)
    for r in c.rows:
        w.writerow((r.scope, r.collective, "" if r.size_bytes is None else r.size_bytes, _num(r.time_a_us),
                    _num(r.time_b_us), _num(r.time_delta_us), _num(r.time_delta_pct, 2), _num(r.busbw_a_GBps, 6),
                    _num(r.busbw_b_GBps, 6), _num(r.busbw_delta_GBps, 6), _num(r.busbw_delta_pct, 2)))
    return out.getvalue()


def _fmt(v: float | None, spec: str) -> str:
    width = int("".join(ch for ch in spec.split(".")[0] if ch.isdigit()) or 0)
    return "-".rjust(width) if v is None else format(v, spec)


def format_compare(c: Comparison) -> str:
    lines = [f"# A: {c.run_a}", f"# B: {c.run_b}"] + [f"# note: {n}" for n in c.notes]
    lines.append(f"#{'what':>26} {'time A':>11} {'time B':>11} {'delta':>11} {'delta':>8} "
                 f"{'busbw A':>9} {'busbw B':>9} {'delta':>8}")
    lines.append(f"#{'':>26} {'(us)':>11} {'(us)':>11} {'(us)':>11} {'(%)':>8} "
                 f"{'(GB/s)':>9} {'(GB/s)':>9} {'(%)':>8}")
    for r in c.rows:
        lines.append(f" {r.label:>26} {r.time_a_us:>11.2f} {r.time_b_us:>11.2f} {r.time_delta_us:>+11.2f} "
                     f"{_fmt(r.time_delta_pct, '+8.1f')} {_fmt(r.busbw_a_GBps, '9.4f')} "
                     f"{_fmt(r.busbw_b_GBps, '9.4f')} {_fmt(r.busbw_delta_pct, '+8.1f')}")
    it = c.iteration
    if it is not None:
        lines.append(f"# iteration time: {it.time_a_us / 1e3:.3f} ms -> {it.time_b_us / 1e3:.3f} ms "
                     f"({_fmt(it.time_delta_pct, '+.1f')}%)")
    return "\n".join(lines)
