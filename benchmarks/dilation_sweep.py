"""Time dilation per size, and what a smaller factor costs a replay (issue #36 item 1; by hand as root, not a
test).

* ``sweep``: `genie bench` on `topologies/star-8-100g.yaml` under ``--time-dilation auto``, all-reduce 1 KiB to
  64 MiB in x4 steps with the CLI's defaults (20 timed + 5 warmup iterations, a check iteration, the in-place
  pass): each size at its own auto factor. Per size: the factor, its wall time here, its time (emulated)
  against the fabric model's wire time for the same algorithm (`astra_adapter.fabric`, uncalibrated: #14's
  small-size reference) and its busbw against the 100 Gbit/s TCP payload limit (#14's bulk reference);
  the whole run's wall time (target <= 10 min).
* ``replay``: a small 8-rank trace (a 16 KiB and a 4 MiB all-reduce around 200 us of compute) replayed at
  ``auto`` (one factor for the whole trace: its iteration's, docs/dilation.md), then at auto / 2 and auto / 4, each
  against the fabric model's estimate: what a smaller factor costs in accuracy.

    sudo .venv/bin/python -m benchmarks.dilation_sweep [--parts sweep,replay] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "topologies" / "star-8-100g.yaml"
SMALL_TRACE = """format: genie-trace
version: 1
name: small-step
ranks: 8
program:
  - {id: 0, type: all_reduce, size: 16KiB}
  - {id: 1, type: compute, duration: 200us, deps: [0]}
  - {id: 2, type: all_reduce, size: 4MiB, deps: [1]}
"""


def _options(factor: str, out: Path):
    from genie.core.dilation import DilationChoice
    from genie.services.options import RunOptions

    return RunOptions(topology=TOPOLOGY, time_dilation=DilationChoice.parse(factor), out=out, sample_ms=0)


def sweep(out: Path, max_bytes: int = 64 << 20, iterations: int = 20, warmup: int = 5) -> dict:
    from benchmarks.dilation import wire_time_us
    from genie.core.collective import Collective
    from genie.core.units import format_size
    from genie.services.bench import BenchCommand, BenchRequest, run_bench_command
    from genie.testbed.verify import goodput_bps

    limit_GBps = goodput_bps(int(100e9), 1500) / 8e9
    request = BenchRequest(collectives=(Collective.ALL_REDUCE,), min_bytes=1024, max_bytes=max_bytes, factor=4,
                           iterations=iterations, warmup=warmup, verify=True, in_place=True, timeout_s=600.0)
    marks: list[float] = []

    @contextlib.contextmanager
    def progress():
        yield lambda *_: marks.append(time.monotonic())

    load = os.getloadavg()[0]
    started = time.monotonic()
    result = run_bench_command(BenchCommand(request, _options("auto", out / "sweep")), progress=progress)
    wall_s = time.monotonic() - started
    plan = {s.size_bytes: s.dilation for s in result.dilation_plan.sizes} if result.dilation_plan else {}
    first_mark = started  # the first size's wall time includes the probe and the testbed: said below
    rows = []
    print(f"# {TOPOLOGY.name}, auto per size; load average {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end; total wall {wall_s:.0f} s", flush=True)
    print(f"{'size':>7} {'N':>7} {'wall s':>7} {'time us':>10} {'wire us':>10} {'ratio':>6} {'busbw':>7} "
          f"{'/limit':>6}  why")
    for i, stats in enumerate(result.outcome.stats):
        dilation = plan.get(stats.size_bytes)
        wire = wire_time_us(stats.size_bytes, stats.algorithm)
        seconds = marks[i] - (marks[i - 1] if i else first_mark)
        row = {"size_bytes": stats.size_bytes, "factor": dilation.factor if dilation else None,
               "reason": dilation.reason if dilation else "", "wall_s": seconds,
               "time_us": stats.time_us, "time_median_us": stats.time_median_us, "wire_us": wire,
               "busbw_GBps": stats.busbw_GBps, "busbw_of_limit": stats.busbw_GBps / limit_GBps,
               "algorithm": stats.algorithm.value}
        rows.append(row)
        print(f"{format_size(stats.size_bytes):>7} {row['factor'] or 0:>7g} {seconds:>7.1f} "
              f"{stats.time_median_us:>10.2f} {wire:>10.2f} {stats.time_median_us / wire:>6.3f} "
              f"{stats.busbw_GBps:>7.3f} {row['busbw_of_limit']:>6.3f}  {row['reason']}", flush=True)
    return {"wall_s": wall_s, "load_start": load, "load_end": os.getloadavg()[0], "rows": rows,
            "run_dir": str(result.run_dir), "first_size_includes": "host probe + testbed up"}


def op_medians_us(run_dir: Path) -> dict[str, float]:
    """Each collective node's median time (slowest rank per iteration), from the replay's ops.csv."""
    import csv
    import statistics

    spans: dict[tuple[str, str], dict[int, float]] = {}
    with open(run_dir / "ops.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["type"] != "compute":
                key = (row["node_id"], f"{row['type']} {row['bytes']} B")
                it = spans.setdefault(key, {})
                took = (int(row["end_ns"]) - int(row["start_ns"])) / 1e3
                it[int(row["iteration"])] = max(it.get(int(row["iteration"]), 0.0), took)
    return {name: statistics.median(v.values()) for (_, name), v in sorted(spans.items())}


def replay(out: Path, divisors: tuple[int, ...] = (2, 4), auto_factor: float | None = None) -> dict:
    from astra_adapter.fabric.estimate import estimate_fabric
    from genie.services.replay import ReplayCommand, ReplayRequest, run_replay_command
    from genie.topology import load_topology_file
    from genie.workloads.native import read_native

    out.mkdir(parents=True, exist_ok=True)
    trace = out / "small-step.yaml"
    trace.write_text(SMALL_TRACE)
    estimate_ms = estimate_fabric(read_native(SMALL_TRACE, source="small-step"),
                                  load_topology_file(TOPOLOGY)).iteration_ns / 1e6
    rows = []
    auto = auto_factor
    print(f"# replay of a 16 KiB + 4 MiB all-reduce step, fabric estimate {estimate_ms:.4f} ms; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    labels = ([] if auto_factor else ["auto"]) + [f"auto/{d}" for d in divisors]
    for label in labels:
        factor = "auto" if label == "auto" else f"{auto / int(label.split('/')[1]):g}"
        started = time.monotonic()
        request = ReplayRequest(iterations=5, warmup=1, timeout_s=600.0)
        result = run_replay_command(ReplayCommand(trace, request, _options(factor, out / label.replace("/", "-"))),
                                    progress=lambda: contextlib.nullcontext(lambda *_: None))
        seconds = time.monotonic() - started
        if label == "auto":
            auto = result.dilation.factor
        measured_ms = result.doc["iteration_median_ns"] / 1e6
        row = {"asked": label, "factor": result.dilation.factor, "reason": result.dilation.reason,
               "measured_ms": measured_ms, "estimate_ms": estimate_ms, "error": measured_ms / estimate_ms - 1,
               "wall_s": seconds, "load": os.getloadavg()[0], "ops_us": op_medians_us(result.run_dir)}
        rows.append(row)
        ops = ", ".join(f"{name} {us:.2f} us" for name, us in row["ops_us"].items())
        print(f"{label:>7} N = {row['factor']:<7g} {measured_ms:.4f} ms ({row['error']:+.1%} vs the estimate), "
              f"{ops}; {seconds:.0f} s wall, load {row['load']:.1f}  {row['reason']}", flush=True)
    return {"estimate_ms": estimate_ms, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dilation_sweep",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="sweep,replay")
    parser.add_argument("--max-bytes", type=int, default=64 << 20, help="the sweep's largest size")
    parser.add_argument("--iterations", type=int, default=20, help="the sweep's timed iterations per size")
    parser.add_argument("--warmup", type=int, default=5, help="the sweep's warmup iterations per size")
    parser.add_argument("--divisors", default="2,4", help="the replay's smaller factors: auto / each")
    parser.add_argument("--auto-factor", type=float, default=None,
                        help="the replay's auto factor from an earlier run (skips the auto run)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / time.strftime("%Y%m%d-%H%M%S-dilation-sweep"))
    args = parser.parse_args(argv)
    results = {}
    for part in args.parts.split(","):
        divisors = tuple(int(d) for d in args.divisors.split(","))
        results[part] = (sweep(args.out, args.max_bytes, args.iterations, args.warmup) if part.strip() == "sweep" else
                         replay(args.out, divisors, args.auto_factor))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dilation_sweep.json").write_text(json.dumps(results, indent=1))
    print(f"# results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
