"""The timed loop every peer rank runs (stdlib only: imported by the gloo and MPI rank programs).

Like genie's engine and nccl-tests: a barrier, untimed warmup iterations, a barrier, then the timed iterations
back to back. Each rank records (start_ns, end_ns) of every timed iteration on CLOCK_MONOTONIC, which all
namespaces of one machine share, so the harness computes iteration times exactly as genie does
(`genie.measure.metrics.iteration_times_ns`: iteration i ends when its last rank ends it).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, TextIO

Span = tuple[int, int]


def timed_loop(op: Callable[[], Any], barrier: Callable[[], Any], warmup: int, iterations: int) -> list[Span]:
    barrier()
    for _ in range(warmup):
        op()
    barrier()
    spans: list[Span] = []
    previous = time.monotonic_ns()
    for _ in range(iterations):
        op()
        now = time.monotonic_ns()
        spans.append((previous, now))
        previous = now
    return spans


def load_job(path: str) -> list[dict[str, Any]]:
    """The cases of a job file: [{"collective", "size_bytes", "warmup", "iterations"}, ...]."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)["cases"]


def write_case(out: TextIO, case: dict[str, Any], spans_per_rank: list[list[Span]]) -> None:
    """One result line (rank 0 only), flushed at once: a later failure keeps what was measured."""
    doc = {"collective": case["collective"], "size_bytes": case["size_bytes"],
           "spans": [[list(s) for s in spans] for spans in spans_per_rank]}
    out.write(json.dumps(doc, separators=(",", ":")) + "\n")
    out.flush()
