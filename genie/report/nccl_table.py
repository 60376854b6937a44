"""`genie bench`'s stdout in nccl-tests' layout (src/util.cu of NVIDIA/nccl-tests: writeDeviceReport,
writeResultHeader, writeBenchmarkLinePreamble/Body, writeResultFooter), so the scripts that parse nccl-tests'
output (grep on ``# Avg bus bandwidth``, awk on column indices) read genie's unchanged.

Conventions taken from nccl-tests' per-collective files: the size column is the larger of the send and receive
buffers (the whole gathered/scattered buffer), ``count`` is the per-rank parameter count (size / ranks /
element size for all_gather, reduce_scatter and alltoall); ``redop`` is the reduction for all_reduce,
reduce_scatter and sendrecv, ``none`` for the others; ``root`` is -1 except for broadcast. ``#wrong`` is the
number of wrong elements when validation is on (genie fails the run on a wrong result, so a printed row has 0),
``N/A`` when it is off. genie's extra figures (algorithm, median, p99) come after nccl-tests' columns only with
``extra=True`` (`genie bench --genie-columns`), where column-index parsers do not look.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from genie.core.collective import ROOTED, Collective
from genie.core.sizes import PER_RANK_SPLIT
from genie.measure.metrics import CaseStats

DTYPE_NAMES = {1: "int8", 2: "half", 4: "float", 8: "double"}
_REDUCING = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.SEND_RECV, Collective.REDUCE)


@dataclass(frozen=True)
class TableConfig:
    """What nccl-tests' header reports: ``nThread``/``nGpus`` are 1 (a genie rank is one process), ``validation``
    is the check iteration count (-c), ``cputime`` titles the time column as -C 1 does, ``per_iteration`` adds
    nccl-tests' -I 1 columns (i_min, i_max, i_p99, i_cv%)."""

    program: str
    min_bytes: int
    max_bytes: int
    step_factor: int
    warmup_iters: int
    iterations: int
    validation: int
    cputime: bool = False
    per_iteration: bool = False
    extra: bool = False
    step_bytes: int = 0  # -i: a linear step (nccl-tests prints it as `step: N(bytes)`); 0: the factor


@dataclass(frozen=True)
class Device:
    rank: int
    pid: int
    host: str
    info: str  # e.g. "genie rank (netns g-ns-h0)"


def redop(stats: CaseStats, op: str = "sum") -> str:
    return op if stats.collective in _REDUCING else "none"


def root(stats: CaseStats, root_rank: int = 0) -> int:
    return root_rank if stats.collective in ROOTED else -1


def param_count(stats: CaseStats) -> int:
    """nccl-tests' ``count`` column: elements per rank for the gathering/scattering collectives."""
    if stats.collective in PER_RANK_SPLIT:
        return stats.count // stats.ranks
    return stats.count


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: the most decimals (2, 1, 0) that fit `width`, else scientific."""
    for text in (f"{value:{width}.2f}", f"{value:{width}.1f}", f"{value:{width}.0f}"):
        if len(text) <= width:
            return text
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def header(config: TableConfig, devices: Sequence[Device]) -> str:
    """From ``# nccl-tests version`` to the column titles (what nccl-tests prints before the first row)."""
    lines = ["# nccl-tests version genie (CPU ranks) nccl-headers=0 nccl-library=0",
             f"# Collective test starting: {config.program}",
             f"# nThread 1 nGpus 1 minBytes {config.min_bytes} maxBytes {config.max_bytes} step: "
             f"{f'{config.step_bytes}(bytes)' if config.step_bytes else f'{config.step_factor}(factor)'} warmup iters: {config.warmup_iters} iters: {config.iterations} "
             f"agg iters: 1 validation: {config.validation} graph: 0 unalign: 0"]
    if config.per_iteration:
        lines.append("# Per-Iteration Report: genie timing; i_* uses the time of each iteration's last rank ")
    lines += ["#", "# Using devices"]
    lines += [f"#  Rank {d.rank:2d} Group  0 Pid {d.pid:6d} on {d.host:>10} device  0 [0000:00:00] {d.info}"
              for d in devices]
    lines.append("#")
    time = "cputime" if config.cputime else "time"
    blank = ("", "", "", "", "")
    if config.per_iteration:
        lines.append("# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)"
                     "                                in-place (+ per-iteration)" % blank)
        titles = ("size", "count", "type", "redop", "root") + (time, "algbw", "busbw", "#wrong", "i_min", "i_max",
                                                               "i_p99", "i_cv%") * 2
        units = ("(B)", "(elements)", "", "", "") + ("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)",
                                                      "(%)") * 2
        form = "# %10s  %12s  %8s  %6s  %6s" + "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s" * 2
    else:
        lines.append("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
                     % blank)
        titles = ("size", "count", "type", "redop", "root") + (time, "algbw", "busbw", "#wrong") * 2
        units = ("(B)", "(elements)", "", "", "") + ("(us)", "(GB/s)", "(GB/s)", "") * 2
        form = "# %10s  %12s  %8s  %6s  %6s" + "  %7s  %6s  %6s  %6s" * 2
    title_line, unit_line = form % titles + " ", form % units + " "
    if config.extra:
        title_line += f" {'algorithm':>18}  {'median':>9}  {'p99':>9}"
        unit_line += f" {'':>18}  {'(us)':>9}  {'(us)':>9}"
    return "\n".join(lines + [title_line, unit_line])


def _body(s: CaseStats | None, config: TableConfig) -> str:
    if s is None:  # not measured (--no-in-place): nccl-tests' column count kept, every field N/A
        cells = "  %7s  %6s  %6s  %6s" % ("N/A", "N/A", "N/A", "N/A")
        return cells + ("  %7s  %7s  %7s  %7s" % (("N/A",) * 4) if config.per_iteration else "")
    wrong = "%6g" % 0 if config.validation else "   N/A"
    out = f"  {float_str(s.time_us, 7)}  {float_str(s.algbw_GBps, 6)}  {float_str(s.busbw_GBps, 6)}  {wrong}"
    if config.per_iteration:
        times = [t / 1e3 for t in s.iteration_ns] or [s.time_us]
        mean = sum(times) / len(times)
        cv = 100.0 * math.sqrt(sum((t - mean) ** 2 for t in times) / len(times)) / mean if mean > 0 else 0.0
        p99 = sorted(times)[min(len(times) - 1, (len(times) * 99 + 99) // 100 - 1)]
        out += "  " + "  ".join(float_str(v, 7) for v in (min(times), max(times), p99, cv))
    return out


def row(out_of_place: CaseStats, in_place: CaseStats | None, config: TableConfig, *, op: str = "sum",
        root_rank: int = 0) -> str:
    """One size: nccl-tests' preamble, then the out-of-place and in-place bodies."""
    s = out_of_place
    line = "%12d  %12d  %8s  %6s  %6s" % (s.size_bytes, param_count(s), DTYPE_NAMES.get(s.dtype_bytes, "uint8"),
                                          redop(s, op), "%6d" % root(s, root_rank))
    line += _body(s, config) + _body(in_place, config)
    if config.extra:
        line += f"  {s.algorithm.value:>18}  {s.time_median_us:9.2f}  {s.time_p99_us:9.2f}"
    return line


def average_busbw(out_of_place: Sequence[CaseStats], in_place: Sequence[CaseStats | None]) -> float:
    """nccl-tests' ``Avg bus bandwidth``: the mean busbw over every measured body (out-of-place and in-place)."""
    values = [s.busbw_GBps for s in out_of_place] + [s.busbw_GBps for s in in_place if s is not None]
    return sum(values) / len(values) if values else 0.0


def footer(out_of_place: Sequence[CaseStats], in_place: Sequence[CaseStats | None], program: str,
           *, min_busbw_GBps: float | None = None) -> str:
    """What nccl-tests prints after the last row (writeResultFooter, finalizeFooter, writeErrors).
    `min_busbw_GBps` is NCCL_TESTS_MIN_BW: the average passes at 90% of it."""
    bw = average_busbw(out_of_place, in_place)
    verdict = "" if min_busbw_GBps is None else ("FAILED" if bw < 0.9 * min_busbw_GBps else "OK")
    return "\n".join([f"# {'Out of bounds values':<20} : 0 OK", f"# {'Avg bus bandwidth':<20} : {bw:g} {verdict}",
                      "#", f"# Collective test concluded: {program}", "#", ""])
