"""`genie report compare A B`: what changed from run A to run B (pure, on loaded run directories).

Rows match on (collective, group size, algorithm, size) - never across group sizes:
- bench and experiment sweeps: one row per sweep case measured in both (median iteration and busbw; the
  `median_*` columns are medians by name: nccl-tests' "time", the mean, is sweep.csv's `time_us`);
- replay runs (and an experiment's replay/): one row per communication op kind, group size, algorithm and
  size (median duration over ranks and iterations, from ops.csv), and one row for the iteration time
  (replay.json's median).
Deltas are B − A; % is relative to A.

Noise band: each run's spread at a row is the range its iterations covered, min..p99 (`genie.report.cases`),
from its per-iteration times where it has them (sweep_detail.csv, sweep.json's iteration_us, ops.csv,
replay.json's iteration_ns), else from sweep.csv's min/p99 columns. A row is *within noise* when B's median
is a time A's iterations also took and A's median one B's took: the band is how far the median can move in
the row's direction before leaving either run's range. Comparing a run with itself: 0% everywhere, every row
within noise.

Runs of different kinds never compare; different workloads (collective sets, trace digests) only with force,
and then with a warning; runs that differ in ranks or target compare with a warning.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from enum import StrEnum

from genie.core.errors import InputError
from genie.report.cases import CaseKey, Spread, spread_of, summary_spread
from genie.report.rundata import RunData, RunKind

COMPARABLE = (RunKind.BENCH, RunKind.REPLAY, RunKind.EXPERIMENT)


class Scope(StrEnum):
    CASE = "case"  # a sweep case (bench, experiment)
    OP = "op"  # a replay's communication op kind, group size, algorithm and size
    ITERATION = "iteration"  # a replay's iteration time


def _pct(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return 100.0 * (b - a) / a


def row_label(scope: Scope | str, collective: str, ranks: int | None, algorithm: str, size_bytes: int | None) -> str:
    """A row's name in tables and plots: ``all_reduce 4r ring 65536B`` (4r: a group of 4 ranks), ``iteration``."""
    if Scope(scope) is Scope.ITERATION:
        return "iteration"
    return f"{collective}{f' {ranks}r' if ranks else ''}{f' {algorithm}' if algorithm else ''} {size_bytes}B"


@dataclass(frozen=True)
class CompareRow:
    scope: Scope
    collective: str
    size_bytes: int | None
    median_a_us: float
    median_b_us: float
    busbw_a_GBps: float | None = None
    busbw_b_GBps: float | None = None
    ranks: int | None = None  # group size
    algorithm: str = ""
    spread_a: Spread | None = None
    spread_b: Spread | None = None

    @property
    def median_delta_us(self) -> float:
        return self.median_b_us - self.median_a_us

    @property
    def median_delta_pct(self) -> float | None:
        return _pct(self.median_a_us, self.median_b_us)

    @property
    def busbw_delta_GBps(self) -> float | None:
        if self.busbw_a_GBps is None or self.busbw_b_GBps is None:
            return None
        return self.busbw_b_GBps - self.busbw_a_GBps

    @property
    def busbw_delta_pct(self) -> float | None:
        return _pct(self.busbw_a_GBps, self.busbw_b_GBps)

    @property
    def noise_us(self) -> float | None:
        """How far B's median may lie from A's, in the direction it moved, and stay within both runs' spread."""
        slower = self.median_delta_us >= 0
        limits = []
        if self.spread_a is not None:
            limits.append(self.spread_a.p99_us - self.median_a_us if slower else self.median_a_us - self.spread_a.min_us)
        if self.spread_b is not None:
            limits.append(self.median_b_us - self.spread_b.min_us if slower else self.spread_b.p99_us - self.median_b_us)
        return max(0.0, min(limits)) if limits else None

    @property
    def noise_pct(self) -> float | None:
        noise = self.noise_us
        return None if noise is None or not self.median_a_us else 100.0 * noise / self.median_a_us

    @property
    def within_noise(self) -> bool | None:
        noise = self.noise_us
        return None if noise is None else abs(self.median_delta_us) <= noise + 1e-9

    @property
    def label(self) -> str:
        return row_label(self.scope, self.collective, self.ranks, self.algorithm, self.size_bytes)


@dataclass(frozen=True)
class Comparison:
    kind: RunKind
    run_a: str
    run_b: str
    rows: tuple[CompareRow, ...]
    notes: tuple[str, ...] = ()  # the warnings, then what was left out
    warnings: tuple[str, ...] = ()  # how the runs differ (ranks, target, workload compared with --force)

    @property
    def iteration(self) -> CompareRow | None:
        return next((r for r in self.rows if r.scope is Scope.ITERATION), None)

    def band_sources(self, side: str) -> tuple[str, ...]:
        """Where run `side` ("a" or "b")'s spreads came from, e.g. per-iteration times (sweep_detail.csv)."""
        spreads = (getattr(r, f"spread_{side}") for r in self.rows)
        return tuple(dict.fromkeys(s.describe() for s in spreads if s is not None))


# ---- are the runs comparable ------------------------------------------------------------------------------
def _world_ranks(run: RunData) -> int | None:
    if run.replay and run.replay.get("ranks"):
        return len(run.replay["ranks"])
    topology = run.manifest.topology if run.manifest else None
    return (topology or {}).get("ranks")


def _target(run: RunData) -> str | None:
    if run.manifest is None:
        return None
    topology = (run.manifest.topology or {}).get("name")
    target = run.manifest.target
    if target and topology and topology != target:
        return f"{target} (topology {topology})"
    return target or topology


def _workload_digest(run: RunData) -> str | None:
    if run.manifest:
        for i in run.manifest.inputs:
            if i.role in ("trace", "workload"):
                return i.sha256
    return None


def _differences(a: RunData, b: RunData, force: bool) -> list[str]:
    """Warnings on how the runs differ; an InputError for different workloads unless `force`."""
    if a.kind is not b.kind:
        raise InputError(f"cannot compare a {a.kind.value} run with a {b.kind.value} run", source=str(b.run_dir))
    if a.kind not in COMPARABLE:
        raise InputError(f"nothing to compare in a {a.kind.value} run (compare bench, replay or experiment runs)",
                         source=str(a.run_dir))
    warnings = []
    workload = []
    if a.sweep and set(a.collectives) != set(b.collectives):
        workload.append(f"collectives {','.join(a.collectives) or '-'} vs {','.join(b.collectives) or '-'}")
    if a.replay is not None or b.replay is not None:
        da, db = _workload_digest(a), _workload_digest(b)
        if da != db:
            workload.append(f"trace sha256 {(da or 'unknown')[:12]} vs {(db or 'unknown')[:12]}")
    for what in workload:
        msg = f"different workloads: {what}"
        if not force:
            hint = "compare what they share" if what.startswith("collectives") else "compare anyway"
            raise InputError(f"{msg} (use --force to {hint})", source=str(b.run_dir))
        warnings.append(msg)
    if a.group_sizes and b.group_sizes and a.group_sizes != b.group_sizes:
        warnings.append(f"runs differ in ranks: group sizes {','.join(map(str, a.group_sizes))} (A) vs "
                        f"{','.join(map(str, b.group_sizes))} (B); rows compare only at equal group sizes")
    wa, wb = _world_ranks(a), _world_ranks(b)
    if wa is not None and wb is not None and wa != wb:
        warnings.append(f"runs differ in ranks: {wa} (A) vs {wb} (B)")
    ta, tb = _target(a), _target(b)
    if ta and tb and ta != tb:
        warnings.append(f"runs differ in target: {ta} (A) vs {tb} (B)")
    return warnings


# ---- rows -----------------------------------------------------------------------------------------------
def _numbered(keys: list) -> list[tuple]:
    """Keys made unique by their occurrence (the n-th repeat of a key matches the other run's n-th)."""
    seen: dict = {}
    out = []
    for k in keys:
        seen[k] = seen.get(k, -1) + 1
        out.append((k, seen[k]))
    return out


def _sweep_spread(run: RunData, key: CaseKey, row) -> Spread:
    times = run.iteration_us.get(key)
    return spread_of(times, run.iteration_source) if times else summary_spread(row, "sweep.csv")


def _sweep_rows(a: RunData, b: RunData) -> tuple[list[CompareRow], int]:
    index_b = dict(zip(_numbered([CaseKey.of(r) for r in b.sweep]), b.sweep))
    out = []
    for numbered, r in zip(_numbered([CaseKey.of(r) for r in a.sweep]), a.sweep):
        other = index_b.get(numbered)
        if other is not None:
            key = numbered[0]
            out.append(CompareRow(Scope.CASE, r.collective, r.size_bytes, r.time_median_us, other.time_median_us,
                                  r.busbw_GBps, other.busbw_GBps, r.ranks, r.algorithm,
                                  _sweep_spread(a, key, r), _sweep_spread(b, key, other)))
    return out, len(a.sweep) + len(b.sweep) - 2 * len(out)


def _op_durations(run: RunData) -> dict[tuple[str, int, str, int], list[float]]:
    """(op kind, group size, algorithm, size) -> durations in us over every rank and iteration of ops.csv."""
    if run.ops is None or run.ops.empty:
        return {}
    comm = run.ops[run.ops["type"].astype(str) != "compute"].copy()
    comm["duration_us"] = (comm["end_ns"] - comm["start_ns"]) / 1e3
    comm["type"] = comm["type"].astype(str)
    comm["group"] = comm["group"].fillna("").astype(str)
    comm["algorithm"] = comm["algorithm"].fillna("").astype(str)
    comm["bytes"] = comm["bytes"].fillna(0).astype(int)
    sizes = comm.groupby(["group", "type", "algorithm", "bytes"])["rank"].transform("nunique")
    out: dict[tuple[str, int, str, int], list[float]] = {}
    for (kind, ranks, algorithm, size), group in comm.assign(ranks=sizes).groupby(
            ["type", "ranks", "algorithm", "bytes"], sort=True):
        out[(str(kind), int(ranks), str(algorithm), int(size))] = [float(d) for d in group["duration_us"]]
    return out


def _replay_rows(a: RunData, b: RunData) -> list[CompareRow]:
    ops_a, ops_b = _op_durations(a), _op_durations(b)
    where_a, where_b = f"{a.replay_prefix}ops.csv", f"{b.replay_prefix}ops.csv"
    out = []
    for key in sorted(ops_a):
        if key in ops_b:
            sa, sb = spread_of(ops_a[key], where_a), spread_of(ops_b[key], where_b)
            kind, ranks, algorithm, size = key
            out.append(CompareRow(Scope.OP, kind, size, sa.median_us, sb.median_us, ranks=ranks, algorithm=algorithm,
                                  spread_a=sa, spread_b=sb))
    if a.replay and b.replay:
        spreads = []
        for run in (a, b):
            times = [t / 1e3 for t in run.replay.get("iteration_ns") or ()]
            spreads.append(spread_of(times, f"{run.replay_prefix}replay.json") if times else None)
        out.append(CompareRow(Scope.ITERATION, "", None, a.replay["iteration_median_ns"] / 1e3,
                              b.replay["iteration_median_ns"] / 1e3, spread_a=spreads[0], spread_b=spreads[1]))
    return out


def compare_runs(a: RunData, b: RunData, *, force: bool = False) -> Comparison:
    warnings = _differences(a, b, force)
    notes = list(warnings)
    rows, only = _sweep_rows(a, b)
    if only:
        notes.append(f"{only} (collective, size) rows are in one run only and are left out (rows match on "
                     "collective, group size, algorithm and size)")
    rows += _replay_rows(a, b)
    if not rows:
        why = f" ({'; '.join(warnings)})" if warnings else ""
        raise InputError(f"the two runs have no measurement in common{why}", source=f"{a.run_dir} vs {b.run_dir}")
    return Comparison(a.kind, str(a.run_dir), str(b.run_dir), tuple(rows), tuple(notes), tuple(warnings))


# ---- output ---------------------------------------------------------------------------------------------
COMPARE_COLUMNS = ("scope", "collective", "ranks", "algorithm", "size_bytes", "median_a_us", "median_b_us",
                   "median_delta_us", "median_delta_pct", "busbw_a_GBps", "busbw_b_GBps", "busbw_delta_GBps",
                   "busbw_delta_pct", "noise_us", "noise_pct", "within_noise", "spread_a_min_us", "spread_a_p99_us",
                   "spread_a_source", "spread_b_min_us", "spread_b_p99_us", "spread_b_source")
NOISE_RULE = ("a row is within noise when B's median lies within A's min..p99 iteration range and A's median "
              "within B's; noise_us is how far the median may move in the row's direction and stay so")


def _round(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


def _spread_fields(s: Spread | None) -> dict[str, object]:
    if s is None:
        return {"min_us": None, "p99_us": None, "source": None}
    return {"min_us": _round(s.min_us), "p99_us": _round(s.p99_us), "source": s.describe()}


def row_fields(r: CompareRow) -> dict[str, object]:
    """One row as plain values (compare.csv's columns, --json's row objects)."""
    sa, sb = _spread_fields(r.spread_a), _spread_fields(r.spread_b)
    return {"scope": r.scope.value, "collective": r.collective, "ranks": r.ranks, "algorithm": r.algorithm,
            "size_bytes": r.size_bytes, "median_a_us": _round(r.median_a_us), "median_b_us": _round(r.median_b_us),
            "median_delta_us": _round(r.median_delta_us), "median_delta_pct": _round(r.median_delta_pct, 2),
            "busbw_a_GBps": _round(r.busbw_a_GBps, 6), "busbw_b_GBps": _round(r.busbw_b_GBps, 6),
            "busbw_delta_GBps": _round(r.busbw_delta_GBps, 6), "busbw_delta_pct": _round(r.busbw_delta_pct, 2),
            "noise_us": _round(r.noise_us), "noise_pct": _round(r.noise_pct, 2), "within_noise": r.within_noise,
            "spread_a_min_us": sa["min_us"], "spread_a_p99_us": sa["p99_us"], "spread_a_source": sa["source"],
            "spread_b_min_us": sb["min_us"], "spread_b_p99_us": sb["p99_us"], "spread_b_source": sb["source"]}


def _cell(v: object) -> object:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    return v


def compare_csv(c: Comparison) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COMPARE_COLUMNS)
    for r in c.rows:
        fields = row_fields(r)
        w.writerow([_cell(fields[k]) for k in COMPARE_COLUMNS])
    return out.getvalue()


def comparison_document(c: Comparison, run_dir: str) -> dict[str, object]:
    """`genie report compare --json`: the key fields per row, each run's spread and the noise band."""
    return {"run_dir": run_dir, "kind": c.kind.value, "run_a": c.run_a, "run_b": c.run_b,
            "key": ["collective", "ranks", "algorithm", "size_bytes"], "warnings": list(c.warnings),
            "notes": [n for n in c.notes if n not in c.warnings],
            "noise_band": {"rule": NOISE_RULE, "a": list(c.band_sources("a")), "b": list(c.band_sources("b"))},
            "rows": [row_fields(r) for r in c.rows]}


def _fmt(v: float | None, spec: str) -> str:
    width = int("".join(ch for ch in spec.split(".")[0] if ch.isdigit()) or 0)
    return "-".rjust(width) if v is None else format(v, spec)


def format_compare(c: Comparison) -> str:
    lines = [f"# A: {c.run_a}", f"# B: {c.run_b}"]
    lines += [f"# {'warning' if n in c.warnings else 'note'}: {n}" for n in c.notes]
    for side in ("a", "b"):
        lines.append(f"# noise band of {side.upper()}: min..p99 of " + (", ".join(c.band_sources(side)) or "unknown"))
    lines.append(f"#{'what':>34} {'median A':>11} {'median B':>11} {'delta':>11} {'delta':>8} {'noise':>7} "
                 f"{'busbw A':>9} {'busbw B':>9} {'delta':>8}")
    lines.append(f"#{'':>34} {'(us)':>11} {'(us)':>11} {'(us)':>11} {'(%)':>8} {'(±%)':>7} "
                 f"{'(GB/s)':>9} {'(GB/s)':>9} {'(%)':>8}")
    for r in c.rows:
        flag = "  within noise" if r.within_noise else ""
        lines.append(f" {r.label:>34} {r.median_a_us:>11.2f} {r.median_b_us:>11.2f} {r.median_delta_us:>+11.2f} "
                     f"{_fmt(r.median_delta_pct, '+8.1f')} {_fmt(r.noise_pct, '7.1f')} {_fmt(r.busbw_a_GBps, '9.4f')} "
                     f"{_fmt(r.busbw_b_GBps, '9.4f')} {_fmt(r.busbw_delta_pct, '+8.1f')}{flag}")
    inside = sum(1 for r in c.rows if r.within_noise)
    lines.append(f"# {inside} of {len(c.rows)} rows within noise")
    it = c.iteration
    if it is not None:
        lines.append(f"# iteration time: {it.median_a_us / 1e3:.3f} ms -> {it.median_b_us / 1e3:.3f} ms "
                     f"({_fmt(it.median_delta_pct, '+.1f')}%)" + (", within noise" if it.within_noise else ""))
    return "\n".join(lines)
