"""nccl-tests-compatible JSON (the layout of nccl-tests' ``-J FILE`` output, file version 2), one file per
collective, named after the nccl-tests binary: ``nccl_all_reduce_perf.json``...

Mapping (docs/reports.md has the full table):
- ``time`` is the mean iteration time in us — nccl-tests divides the timed loop's wall time by the iteration
  count, which is the mean of genie's per-iteration times; without per-iteration times genie's median is used
  (``genie_time_statistic`` says which). ``alg_bw``/``bus_bw`` follow from it with nccl-tests' factors.
- genie measures one buffer layout per collective (docs/collectives.md), so the same numbers are written as
  ``out_of_place`` and ``in_place``; ``nwrong`` is 0 with ``--verify`` (a wrong result fails the run), else null.
- ``*_per_iter`` blocks (nccl-tests' per-iteration report) are written when per-iteration times are known.
- devices: one entry per rank, ``hostname`` = testbed host, ``device_info`` = "genie rank (netns NS)".
- ``env`` is left empty (genie does not copy the environment into reports); ``nccl_version`` is 0.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any, Mapping, Sequence

from genie.collectives.busbw import busbw_factor
from genie.core.collective import Collective
from genie.measure.metrics import CaseStats

JSON_FILE_VERSION = 2
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"

BINARIES = {Collective.ALL_REDUCE: "all_reduce_perf", Collective.ALL_GATHER: "all_gather_perf",
            Collective.REDUCE_SCATTER: "reduce_scatter_perf", Collective.ALL_TO_ALL: "alltoall_perf",
            Collective.BROADCAST: "broadcast_perf", Collective.SEND_RECV: "sendrecv_perf"}
_REDOPS = {Collective.ALL_REDUCE: "sum", Collective.REDUCE_SCATTER: "sum"}
_TYPES = {1: "int8", 2: "half", 4: "float", 8: "double"}


def file_name(collective: Collective) -> str:
    return f"nccl_{BINARIES[collective]}.json"


def per_iteration_stats(times_us: Sequence[float]) -> dict[str, Any]:
    """nccl-tests' IterStats: sorted-index percentiles, population standard deviation."""
    s = sorted(times_us)
    n = len(s)
    avg = sum(s) / n
    stdev = math.sqrt(sum((t - avg) ** 2 for t in s) / n)

    def pct(p: int) -> float:
        return s[min(n - 1, (n * p + 99) // 100 - 1)]

    return {"min_us": s[0], "max_us": s[-1], "avg_us": avg, "p50_us": s[n // 2], "p95_us": pct(95),
            "p99_us": pct(99), "stdev_us": stdev, "cv_pct": stdev / avg * 100.0 if avg > 0 else 0.0,
            "times_us": list(times_us)}


def _result(s: CaseStats, times_ns: Sequence[int], verify: bool) -> dict[str, Any]:
    times_us = [t / 1e3 for t in times_ns]
    time_us = sum(times_us) / len(times_us) if times_us else s.time_median_us
    alg_bw = s.size_bytes / (time_us * 1e3) if time_us > 0 else 0.0
    body = {"time": time_us, "alg_bw": alg_bw, "bus_bw": alg_bw * busbw_factor(s.collective, s.ranks),
            "nwrong": 0.0 if verify else None}
    root = 0 if s.collective is Collective.BROADCAST else -1
    row: dict[str, Any] = {"size": s.size_bytes, "count": s.count, "type": _TYPES.get(s.dtype_bytes, "uint8"),
                           "redop": _REDOPS.get(s.collective, "none"), "root": f"{root:6d}",
                           "out_of_place": body}
    if times_us:
        row["out_of_place_per_iter"] = per_iteration_stats(times_us)
    row["in_place"] = dict(body)
    if times_us:
        row["in_place_per_iter"] = per_iteration_stats(times_us)
    row["actual_iterations"] = s.iterations
    row["experiment_name"] = ""
    row["genie_algorithm"] = s.algorithm.value
    row["genie_time_statistic"] = "mean" if times_us else "median"
    return row


def nccl_tests_documents(stats: Sequence[CaseStats], iteration_ns: Sequence[Sequence[int]] | None, *,
                         config: Mapping[str, Any], argv: Sequence[str], devices: Sequence[Mapping[str, Any]],
                         start_time: datetime, end_time: datetime, genie_version: str) -> dict[str, str]:
    """{file name: JSON text} for every collective in `stats` (in first-seen order).

    `config`: min_bytes, max_bytes, step_factor, warmup_iters, iterations, verify. `devices`: per rank
    {rank, host, netns, pid}."""
    by_collective: dict[Collective, list[int]] = {}
    for i, s in enumerate(stats):
        by_collective.setdefault(s.collective, []).append(i)
    verify = bool(config.get("verify"))
    out = {}
    for collective, indexes in by_collective.items():
        results = [_result(stats[i], (iteration_ns[i] if iteration_ns and i < len(iteration_ns) else ()), verify)
                   for i in indexes]
        bus = [r["out_of_place"]["bus_bw"] for r in results]
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
                "blocking_collectives": "false", "per_iter_timing": "true" if iteration_ns else "false",
                "parallel_init": "false",
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
