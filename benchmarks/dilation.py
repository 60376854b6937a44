"""Time dilation's benchmark (issue #14 item 5; run by hand as root, not a test).

On `topologies/star-8-100g.yaml` (8 hosts, 100 Gbit/s, 1 us per link) at every factor asked for (default:
1, 10, 100 and auto), each part a separate genie run through the services (a fresh testbed each, so ``auto``
chooses for that run's smallest message):

* ``bulk``: a 64 MiB all-reduce on 8 ranks; its bus bandwidth (emulated) against the 100 Gbit/s TCP payload
  limit (target 0.95-1.02);
* ``small``: a 1 KiB all-reduce on 8 ranks; its time (emulated) against the fabric model's wire time for the
  same algorithm on the same topology (`astra_adapter.fabric`, uncalibrated: hops x delay + serialization;
  target within 10% and under 20 us);
* ``replay``: `traces/gen_tp2_dp4_gpt3` replayed on the dilated fabric against the fabric model's estimate
  for that fabric (target within 5%).

Each row says which factor the run used (auto: what it chose, and why) and how long it took here.

    sudo .venv/bin/python -m benchmarks.dilation [--factors 1,10,100,auto] [--parts bulk,small,replay]
                                                 [--iterations N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "topologies" / "star-8-100g.yaml"
TRACE = ROOT / "traces" / "gen_tp2_dp4_gpt3"


@dataclass
class Row:
    factor: str
    part: str
    used_factor: float
    measured: float
    reference: float
    unit: str
    seconds: float
    reason: str
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at the start and at the end of the part

    @property
    def ratio(self) -> float:
        return self.measured / self.reference if self.reference else float("nan")


def _options(factor: str, out: Path):
    from genie.core.dilation import DilationChoice
    from genie.services.options import RunOptions

    return RunOptions(topology=TOPOLOGY, time_dilation=DilationChoice.parse(None if factor == "1" else factor),
                      out=out, sample_ms=0)


def _used(run_dir: Path) -> tuple[float, str]:
    doc = json.loads((run_dir / "manifest.json").read_text()).get("time_dilation") or {}
    return float(doc.get("factor", 1.0)), str(doc.get("reason", ""))


def _bench(factor: str, size: int, iterations: int, out: Path):
    from genie.core.collective import Collective
    from genie.services.bench import BenchCommand, BenchRequest, run_bench_command
    import contextlib

    request = BenchRequest(collectives=(Collective.ALL_REDUCE,), min_bytes=size, max_bytes=size,
                           iterations=iterations, warmup=2 if size < 1 << 20 else 1, verify=False,
                           in_place=False, timeout_s=600.0)
    result = run_bench_command(BenchCommand(request, _options(factor, out)),
                               progress=lambda: contextlib.nullcontext(lambda *_: None))
    return result.outcome.stats[0], result.run_dir


def wire_time_us(size: int, algorithm) -> float:
    """The fabric model's time for one all-reduce of `size` on the star's 8 ranks with `algorithm`,
    uncalibrated: the wire model the issue names."""
    from astra_adapter.fabric.estimate import estimate_fabric
    from genie.topology import load_topology_file
    from genie.workloads.native import read_native

    text = (f"format: genie-trace\nversion: 1\nname: one-op\nranks: 8\nprogram:\n"
            f"  - {{id: 0, name: op, type: all_reduce, size: {size}, algorithm: {algorithm.value}}}\n")
    trace = read_native(text, source="one-op")
    return estimate_fabric(trace, load_topology_file(TOPOLOGY)).iteration_ns / 1e3


def run_part(part: str, factor: str, iterations: int, out: Path) -> Row:
    from genie.testbed.verify import goodput_bps

    started = time.monotonic()
    run = out / f"{part}-N{factor}"
    if part == "bulk":
        stats, run_dir = _bench(factor, 64 << 20, iterations, run)
        limit = goodput_bps(int(100e9), 1500) / 8e9  # the TCP payload limit, GB/s
        used, reason = _used(run_dir)
        return Row(factor, part, used, stats.busbw_GBps, limit, "GB/s busbw", time.monotonic() - started, reason)
    if part == "small":
        stats, run_dir = _bench(factor, 1024, max(iterations, 20), run)
        used, reason = _used(run_dir)
        return Row(factor, part, used, stats.time_median_us, wire_time_us(1024, stats.algorithm), "us",
                   time.monotonic() - started, reason)
    return _replay(factor, iterations, run, started)


def _replay(factor: str, iterations: int, run: Path, started: float) -> Row:
    import contextlib

    from astra_adapter.fabric.estimate import estimate_fabric
    from genie.services.replay import ReplayCommand, ReplayRequest, load_checked_trace, run_replay_command
    from genie.topology import load_topology_file

    request = ReplayRequest(iterations=max(1, iterations // 2), warmup=1, timeout_s=600.0)
    result = run_replay_command(ReplayCommand(TRACE, request, _options(factor, run)),
                                progress=lambda: contextlib.nullcontext(lambda *_: None))
    measured_ms = result.doc["iteration_median_ns"] / 1e6
    trace, _warnings = load_checked_trace(TRACE, None)
    estimate_ms = estimate_fabric(trace, load_topology_file(TOPOLOGY)).iteration_ns / 1e6
    used, reason = _used(result.run_dir)
    return Row(factor, "replay", used, measured_ms, estimate_ms, "ms", time.monotonic() - started, reason)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dilation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--factors", default="1,10,100,auto")
    parser.add_argument("--parts", default="bulk,small,replay")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / time.strftime("%Y%m%d-%H%M%S-dilation"))
    args = parser.parse_args(argv)
    rows = []
    print(f"# {TOPOLOGY.name}; load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    print(f"{'N asked':>8} {'part':<7} {'N used':>8} {'measured':>12} {'reference':>12} {'ratio':>7} "
          f"{'unit':<11} {'wall s':>7} {'load':>9}  why", flush=True)
    for factor in args.factors.split(","):
        for part in args.parts.split(","):
            load = os.getloadavg()[0]
            row = run_part(part, factor.strip(), args.iterations, args.out)
            row.load = (load, os.getloadavg()[0])
            rows.append(row)
            print(f"{row.factor:>8} {row.part:<7} {row.used_factor:>8g} {row.measured:>12.4f} {row.reference:>12.4f} "
                  f"{row.ratio:>7.3f} {row.unit:<11} {row.seconds:>7.0f} {row.load[0]:>4.1f}-{row.load[1]:<4.1f}  {row.reason}",
                  flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dilation.json").write_text(json.dumps(
        [{**row.__dict__, "ratio": row.ratio} for row in rows], indent=1))
    print(f"# load average {os.getloadavg()[0]:.1f} at the end; results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
