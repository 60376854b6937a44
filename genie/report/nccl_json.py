"""nccl-tests-compatible JSON (the layout of nccl-tests' ``-J FILE`` output, file version 3, src/util.cu), one
file per collective, named after the nccl-tests binary: ``nccl_all_reduce_perf.json``...

Mapping (docs/reports.md has the full table):
- ``time`` is genie's time (CaseStats.time_us: the mean iteration time, nccl-tests' loop time / iterations);
  ``alg_bw``/``bus_bw`` follow from it with nccl-tests' factors. ``cpu_time`` instead with -C 1.
- ``size``, ``count``, ``redop``, ``root`` as nccl-tests' table (genie.report.nccl_table): ``count`` per rank.
- ``in_place`` is the in-place pass measured separately (`genie bench` runs each size twice, as nccl-tests
  does), null when it was not run (``--no-in-place``); ``nwrong`` 0 with validation (a wrong result fails the
  run), else null.
- ``*_per_iter`` blocks (nccl-tests' -I 1 report) from genie's per-iteration times, with
  ``per_process_max_times_us``: each rank's own iteration times (a genie rank is one process).
- devices: one entry per rank, ``pid`` the rank's process, ``hostname`` = testbed host, ``device_info`` =
  "genie rank (netns NS)". ``env`` is left empty (genie does not copy the environment into reports);
  ``nccl_version`` is 0.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any, Mapping, Sequence

from genie.core.collective import Collective
from genie.measure.metrics import CaseStats
from genie.report import nccl_table

JSON_FILE_VERSION = 3
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"

BINARIES = {Collective.ALL_REDUCE: "all_reduce_perf", Collective.ALL_GATHER: "all_gather_perf",
            Collective.REDUCE_SCATTER: "reduce_scatter_perf", Collective.ALL_TO_ALL: "alltoall_perf",
            Collective.BROADCAST: "broadcast_perf", Collective.SEND_RECV: "sendrecv_perf",
            Collective.REDUCE: "reduce_perf", Collective.GATHER: "gather_perf", Collective.SCATTER: "scatter_perf"}


def file_name(collective: Collective) -> str:
    return f"nccl_{BINARIES[collective]}.json"


def per_iteration_stats(times_us: Sequence[float], per_process_us: Sequence[Sequence[float]] = ()) -> dict[str, Any]:
    """nccl-tests' IterStats: sorted-index percentiles, population standard deviation."""
    s = sorted(times_us)
    n = len(s)
    avg = sum(s) / n
    stdev = math.sqrt(sum((t - avg) ** 2 for t in s) / n)

    def pct(p: int) -> float:
        return s[min(n - 1, (n * p + 99) // 100 - 1)]

    out = {"skipped_iterations": 0, "min_us": s[0], "max_us": s[-1], "avg_us": avg, "p50_us": s[n // 2],
           "p95_us": pct(95), "p99_us": pct(99), "stdev_us": stdev,
           "cv_pct": stdev / avg * 100.0 if avg > 0 else 0.0, "times_us": list(times_us)}
    if len(per_process_us) > 1:
        out["per_process_max_times_us"] = [list(p) for p in per_process_us]
    return out


def _body(s: CaseStats, verify: bool, time_key: str) -> dict[str, Any]:
    return {time_key: s.time_us, "alg_bw": s.algbw_GBps, "bus_bw": s.busbw_GBps, "nwrong": 0.0 if verify else None}


def _per_iter(s: CaseStats) -> dict[str, Any] | None:
    if not s.iteration_ns:
        return None
    return per_iteration_stats([t / 1e3 for t in s.iteration_ns],
                               [[t / 1e3 for t in r] for r in s.rank_iteration_ns])


def _result(s: CaseStats, in_place: CaseStats | None, verify: bool, *, cputime: bool = False, op: str = "sum",
            root_rank: int = 0) -> dict[str, Any]:
    time_key = "cpu_time" if cputime else "time"
    row: dict[str, Any] = {"size": s.size_bytes, "count": nccl_table.param_count(s),
                           "type": nccl_table.DTYPE_NAMES.get(s.dtype_bytes, "uint8"),
                           "redop": nccl_table.redop(s, op), "root": f"{nccl_table.root(s, root_rank):6d}",
                           "out_of_place": _body(s, verify, time_key)}
    if (per := _per_iter(s)) is not None:
        row["out_of_place_per_iter"] = per
    row["in_place"] = None if in_place is None else _body(in_place, verify, time_key)
    if in_place is not None and (per := _per_iter(in_place)) is not None:
        row["in_place_per_iter"] = per
    row["actual_iterations"] = s.iterations
    row["experiment_name"] = ""
    row["genie_algorithm"] = s.algorithm.value
    row["genie_time_median_us"] = s.time_median_us
    return row


def nccl_tests_documents(stats: Sequence[CaseStats], in_place: Sequence[CaseStats | None] | None = None, *,
                         config: Mapping[str, Any], argv: Sequence[str], devices: Sequence[Mapping[str, Any]],
                         start_time: datetime, end_time: datetime, genie_version: str) -> dict[str, str]:
    """{file name: JSON text} for every collective in `stats` (in first-seen order); `in_place[i]` is the
    in-place pass of `stats[i]` (None: not measured).

    `config`: min_bytes, max_bytes, step_factor, warmup_iters, iterations, verify (and optionally cputime, op,
    root). `devices`: per rank {rank, host, netns, pid}."""
    by_collective: dict[Collective, list[int]] = {}
    for i, s in enumerate(stats):
        by_collective.setdefault(s.collective, []).append(i)
    verify = bool(config.get("verify"))
    out = {}
    for collective, indexes in by_collective.items():
        results = [_result(stats[i], in_place[i] if in_place and i < len(in_place) else None, verify,
                           cputime=bool(config.get("cputime")), op=str(config.get("op", "sum")),
                           root_rank=int(config.get("root", 0))) for i in indexes]
        bus = [b["bus_bw"] for r in results for b in (r["out_of_place"], r["in_place"]) if b is not None]
        per_iter = any("out_of_place_per_iter" in r for r in results)
        doc = {
            "version": JSON_FILE_VERSION,
            "start_time": start_time.strftime(TIME_FORMAT),
            "args": list(argv),
            "env": [],
            "nccl_version": 0,
            "genie_version": genie_version,
            "config": {
                "nthreads": 1, "ngpus": 1,
                "minimum_bytes": int(config.get("min_bytes", 0)), "maximum_bytes": int(config.get("max_bytes", 0)),
                "step_factor": int(config.get("step_factor", 2)),
                "warmup_iters": int(config.get("warmup_iters", 0)), "iterations": int(config.get("iterations", 0)),
                "aggregated_iterations": 1, "validation": int(verify), "graph": 0,
                "blocking_collectives": "false", "per_iter_timing": "true" if per_iter else "false",
                "per_iter_skip": 0, "parallel_init": "false",
                "devices": [{"rank": int(d["rank"]), "group": 0, "pid": int(d.get("pid") or 0),
                             "hostname": str(d.get("host", "")), "device": 0, "device_hex": "",
                             "device_info": f"genie rank (netns {d.get('netns') or '-'})"} for d in devices],
            },
            "results": results,
            "out_of_bounds": {"count": 0, "okay": "true"},
            "average_bus_bandwidth": {"bandwidth": sum(bus) / len(bus) if bus else 0.0, "okay": "unchecked"},
            "errors": [],
            "end_time": end_time.strftime(TIME_FORMAT),
        }
        out[file_name(collective)] = json.dumps(doc, indent=2) + "\n"
    return out
