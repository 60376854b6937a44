"""A software-bound replay under time dilation: how late ranks start each iteration, and what ``auto`` chooses
for it (issue #36 item 1; by hand as root, not a test).

A 2-host star at 10 Gbit/s with 5 us per link, a 2-rank trace of a 16 KiB all-reduce, 2 ms of compute and a
4 MiB all-reduce (session 19 found `auto` at 20 and the replay 15 % off the fabric estimate there). At every
factor asked for (``auto`` or a number), one `genie replay` (1 warmup + `--iterations` timed) on a fresh
testbed of that topology, against the fabric model's estimate for the stated fabric. Per run: the factor and
why, the iteration (median) and its error, the first op's start after the iteration's start per rank
(emulated, and x N: real microseconds), the 16 KiB all-reduce's time, wall time and load average.

    sudo .venv/bin/python -m benchmarks.dilation_start [--factors auto,20,100] [--iterations 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = """name: star-2-10g
defaults: {bandwidth: 10gbit, delay: 5us}
hosts:
  - {prefix: h, count: 2}
switches:
  - {name: s0, kind: bridge}
links:
  - {endpoints: [h0, s0]}
  - {endpoints: [h1, s0]}
"""
TRACE = """format: genie-trace
version: 1
name: software-bound
ranks: 2
program:
  - {id: 0, type: all_reduce, size: 16KiB}
  - {id: 1, type: compute, duration: 2ms, deps: [0]}
  - {id: 2, type: all_reduce, size: 4MiB, deps: [1]}
"""


def first_starts_us(run_dir: Path) -> list[float]:
    """Every (iteration, rank)'s first node start after the iteration's start (emulated us, ops.csv)."""
    first: dict[tuple[str, str], float] = {}
    with open(run_dir / "ops.csv", newline="") as f:
        for row in csv.DictReader(f):
            key = (row["iteration"], row["rank"])
            first[key] = min(first.get(key, float("inf")), int(row["start_ns"]) / 1e3)
    return sorted(first.values())


def small_op_us(run_dir: Path) -> float:
    """The 16 KiB all-reduce's median time (its slowest rank per iteration), emulated us."""
    spans: dict[str, float] = {}
    with open(run_dir / "ops.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["node_id"] == "0":
                took = (int(row["end_ns"]) - int(row["start_ns"])) / 1e3
                spans[row["iteration"]] = max(spans.get(row["iteration"], 0.0), took)
    return statistics.median(spans.values())


def run(index: int, factor: str, iterations: int, out: Path, topology: Path, trace: Path, estimate_ms: float) -> dict:
    from genie.core.dilation import DilationChoice
    from genie.services.options import RunOptions
    from genie.services.replay import ReplayCommand, ReplayRequest, run_replay_command

    load = os.getloadavg()[0]
    started = time.monotonic()
    options = RunOptions(topology=topology, time_dilation=DilationChoice.parse(factor), out=out / f"{index}-N{factor}",
                         sample_ms=0)
    result = run_replay_command(ReplayCommand(trace, ReplayRequest(iterations=iterations, warmup=1, timeout_s=600.0),
                                              options),
                                progress=lambda: contextlib.nullcontext(lambda *_: None))
    wall_s = time.monotonic() - started
    n = result.dilation.factor
    measured_ms = result.doc["iteration_median_ns"] / 1e6
    starts = first_starts_us(result.run_dir)
    return {"asked": factor, "factor": n, "reason": result.dilation.reason,
            "limits": [limit.to_dict() for limit in result.dilation.limits],
            "measured_ms": measured_ms, "estimate_ms": estimate_ms, "error": measured_ms / estimate_ms - 1,
            "first_start_us": starts, "first_start_real_us": [s * n for s in starts],
            "small_op_us": small_op_us(result.run_dir), "wall_s": wall_s, "load": (load, os.getloadavg()[0]),
            "run_dir": str(result.run_dir)}


def main(argv: list[str] | None = None) -> int:
    from astra_adapter.fabric.estimate import estimate_fabric
    from genie.topology import load_topology_file
    from genie.workloads.native import read_native

    parser = argparse.ArgumentParser(prog="python -m benchmarks.dilation_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--factors", default="auto,20,100")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / time.strftime("%Y%m%d-%H%M%S-dilation-start"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    topology, trace = args.out / "star-2-10g.yaml", args.out / "software-bound.yaml"
    topology.write_text(TOPOLOGY)
    trace.write_text(TRACE)
    estimate_ms = estimate_fabric(read_native(TRACE, source=str(trace)), load_topology_file(topology)).iteration_ns / 1e6
    print(f"# fabric estimate {estimate_ms:.4f} ms per iteration; load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for index, factor in enumerate(args.factors.split(",")):
        row = run(index, factor.strip(), args.iterations, args.out, topology, trace, estimate_ms)
        rows.append(row)
        real = row["first_start_real_us"]
        print(f"{row['asked']:>5} N = {row['factor']:<6g} {row['measured_ms']:.4f} ms ({row['error']:+.1%}); "
              f"first op starts {statistics.median(row['first_start_us']):.1f} us median, "
              f"{max(row['first_start_us']):.1f} max (real {statistics.median(real):.0f} / {max(real):.0f} us); "
              f"16 KiB all-reduce {row['small_op_us']:.1f} us; {row['wall_s']:.0f} s wall, load "
              f"{row['load'][0]:.1f}-{row['load'][1]:.1f}  {row['reason']}", flush=True)
        for limit in row["limits"]:
            print(f"        {limit}", flush=True)
    (args.out / "dilation_start.json").write_text(json.dumps(rows, indent=1))
    print(f"# results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
