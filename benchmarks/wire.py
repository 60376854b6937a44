"""Wire-faithful links (issue #14 item 1; run by hand as root, not a test).

On `topologies/star-8.yaml` (1 Gbit/s per host link) for each link model (``bucket``: HTB alone; ``wire``: HTB
plus the emulator's wire stage) and each factor asked for, one testbed each:

* p2p one-way time (OSU's latency test, 2 ranks, 1 KiB-1 MiB) against the wire model — the fabric model's
  time for that message on that path, uncalibrated (serialization at the rate + the configured delay): the
  target is within 5% (or 20 us) and never below it;
* the all-reduce sweep 1 KiB-64 MiB on 4 and on 8 ranks: the largest bus bandwidth over the TCP payload
  limit at any size (target <= 1) and the 64 MiB one (target >= 0.99);
* what it costs: CPU seconds of the link emulators and of the whole machine per GB the links moved.

    sudo .venv/bin/python -m benchmarks.wire [--models bucket,wire] [--factors 1] [--parts p2p,allreduce]
                                             [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "topologies" / "star-8.yaml"
OSU_SIZES = [1 << k for k in range(10, 21, 2)]  # 1 KiB .. 1 MiB


def _cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total


def _machine_ticks() -> int:
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)


def wire_one_way_us(size: int, topology) -> float:
    """The fabric model's time for one message of `size` from h0 to h1 (p2p), uncalibrated."""
    from astra_adapter.fabric.estimate import estimate_fabric
    from genie.workloads.native import read_native

    text = (f"format: genie-trace\nversion: 1\nname: p2p\nranks: 2\nprogram:\n"  # each way at once: one-way each
            f"  - {{id: 0, name: s, type: send, size: {size}, peer: '+1', tag: 1}}\n"
            f"  - {{id: 1, name: r, type: recv, size: {size}, peer: '-1', tag: 1}}\n")
    from genie.topology import star

    pair = star(2, shape=topology.links[0].shape)  # h0 - s0 - h1 as on the star
    return estimate_fabric(read_native(text, source="p2p"), pair).iteration_ns / 1e3


def run_model(model: str, factor: float, out: Path, parts: tuple[str, ...] = ("p2p", "allreduce")) -> dict:
    from genie.core.dilation import fixed_dilation
    from genie.core.testbed import LinkModel
    from genie.measure.osu import OsuTest
    from genie.services.bench import BenchCommand, BenchRequest, run_bench_command
    from genie.services.osu import osu_request
    from genie.testbed.verify import goodput_bps
    from genie.services.options import RunOptions
    from genie.testbed import service
    from genie.testbed.state import load_record
    from genie.topology import load_topology_file

    topology = load_topology_file(TOPOLOGY)
    name = f"wire-{model}"
    quiet = lambda: contextlib.nullcontext(lambda *_: None)  # noqa: E731
    info = service.up(topology, name=name, source=None, links=LinkModel(model), dilation=fixed_dilation(factor))
    try:
        emulators = [pid for _, pid, _ in load_record(name).emulators]
        opts = lambda sub: RunOptions(testbed=name, out=out / f"{name}-N{factor:g}-{sub}", sample_ms=0)  # noqa
        result: dict = {"model": model, "factor": factor, "shaper": info.shaper.label}
        latency = osu_request(OsuTest.LATENCY, BenchRequest(min_bytes=1024, max_bytes=1 << 20, factor=4,
                                                            iterations=50, warmup=5))
        osu = run_bench_command(BenchCommand(latency, opts("osu")), quiet)
        rows = []
        for stats in osu.outcome.stats:  # OSU's latency: a ping-pong's round trip / 2 (median)
            model_us = wire_one_way_us(stats.size_bytes, topology)
            one_way = stats.time_median_us / 2
            rows.append({"size": stats.size_bytes, "median_us": one_way, "wire_us": model_us,
                         "error_pct": 100 * (one_way - model_us) / model_us})
        result["p2p"] = rows
        for ranks in (4, 8) if "allreduce" in parts else ():
            before = (_cpu_ticks(emulators), _machine_ticks(), time.monotonic())
            sweep = run_bench_command(BenchCommand(BenchRequest(min_bytes=1024, max_bytes=64 << 20, factor=4,
                                                                iterations=10, warmup=2, ranks=ranks, verify=False,
                                                                in_place=False), opts(f"ar{ranks}")), quiet)
            after = (_cpu_ticks(emulators), _machine_ticks(), time.monotonic())
            limit = goodput_bps(int(1e9), 1500) / 8e9  # the TCP payload limit, GB/s
            moved_gb = (sweep.links or {}).get("link_bytes", 0) / 1e9
            result[f"allreduce{ranks}"] = {
                "busbw_over_limit": {s.size_bytes: round(s.busbw_GBps / limit, 4) for s in sweep.outcome.stats},
                "max_over_limit": max(s.busbw_GBps / limit for s in sweep.outcome.stats),
                "64M_over_limit": sweep.outcome.stats[-1].busbw_GBps / limit,
                "emulator_cpu_s": (after[0] - before[0]) / os.sysconf("SC_CLK_TCK"),
                "machine_cpu_s": (after[1] - before[1]) / os.sysconf("SC_CLK_TCK"),
                "wall_s": after[2] - before[2], "links_moved_gb": moved_gb}
        return result
    finally:
        service.down(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wire", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bucket,wire")
    parser.add_argument("--factors", default="1")
    parser.add_argument("--parts", default="p2p,allreduce", help="p2p (one-way times), allreduce (sweeps)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / time.strftime("%Y%m%d-%H%M%S-wire"))
    args = parser.parse_args(argv)
    results = []
    print(f"# {TOPOLOGY.name}; load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    for factor in [float(f) for f in args.factors.split(",")]:
        for model in args.models.split(","):
            r = run_model(model, factor, args.out, tuple(args.parts.split(",")))
            results.append(r)
            print(f"## {model} links, N = {factor:g} ({r['shaper']})", flush=True)
            for row in r["p2p"]:
                print(f"p2p {row['size']:>8} B  median {row['median_us']:9.1f} us  wire {row['wire_us']:9.1f} us  "
                      f"{row['error_pct']:+6.1f}%", flush=True)
            for ranks in (4, 8) if "allreduce4" in r else ():
                a = r[f"allreduce{ranks}"]
                print(f"all-reduce {ranks} ranks: busbw/limit max {a['max_over_limit']:.3f}, 64 MiB "
                      f"{a['64M_over_limit']:.3f}; CPU s: emulators {a['emulator_cpu_s']:.1f}, machine "
                      f"{a['machine_cpu_s']:.1f} in {a['wall_s']:.1f} s; per size "
                      + " ".join(f"{k}:{v}" for k, v in a["busbw_over_limit"].items()), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "wire.json").write_text(json.dumps(results, indent=1))
    print(f"# load average {os.getloadavg()[0]:.1f} at the end; results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
