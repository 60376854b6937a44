"""The fabric model's speed on an asymmetric trace (issue #36, item 6; run by hand, not a test).

Generates, into a temporary directory (or ``--out``), an MoE trace with genie's own generator - expert
parallelism 8 at 1024 ranks, uneven (skewed) expert routing, so the all-to-alls differ per rank and no rank
mirrors another - and a 3-tier fabric with one host per rank (leaves, pods of aggregation routers, cores;
:func:`benchmarks.fabric_accuracy.three_tier`), then times ``genie estimate TRACE --topology FILE --mode
fabric`` as a user runs it (a child process: the Chakra ET read, the model's default ECMP hash draws, the
report). It prints the wall time, the CPU time with the draws' workers, the load average before and after, and
the problem's size: ranks, trace nodes, the flows the model plays per draw, link directions (target: < 60 s).

    python3 benchmarks/fabric_speed.py [--ranks 1024] [--ep 8] [--routing-skew 1.0] [--layers N]
                                       [--out DIR] [--repeat 1] [--in-process [--ecmp-samples N]]

``--in-process`` also runs the estimate in this process with the trace read and the model timed apart, and
counts the flows (one play's worth: every op's schedule steps).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
MODEL = "mixtral-8x7b"


def topology_for(ranks: int):
    """A 3-tier fabric with ``ranks`` hosts of one rank each: 32 hosts per leaf, 8 leaves and 4 aggregation
    routers per pod, 4 cores (1024 ranks: 4 pods, 32 leaves, 16 aggregation routers)."""
    from benchmarks.fabric_accuracy import three_tier

    hosts_per_leaf, leaves_per_pod = 32, 8
    per_pod = hosts_per_leaf * leaves_per_pod
    if ranks % per_pod:
        raise SystemExit(f"--ranks must be a multiple of {per_pod} (hosts per pod), got {ranks}")
    return three_tier(hosts_per_leaf=hosts_per_leaf, leaves_per_pod=leaves_per_pod, pods=ranks // per_pod,
                      aggs_per_pod=4, cores=4, ranks_per_host=1)


def genie_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "genie.cli.main", *args]


def _run(argv: list[str]) -> tuple[subprocess.CompletedProcess, float, float]:
    """(process, wall s, CPU s of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def generate(out: Path, ranks: int, ep: int, skew: float, layers: int | None) -> Path:
    prefix = out / "moe" / "moe"
    argv = genie_argv("trace", "gen", "--model", MODEL, "--dp", str(ranks), "--ep", str(ep), "--routing-skew",
                      f"{skew:g}", "--out", str(prefix), "--to", "et", *(("--layers", str(layers)) if layers else ()))
    done, wall, _ = _run(argv)
    if done.returncode:
        raise SystemExit(f"genie trace gen failed: {done.stderr.strip() or done.stdout.strip()}")
    print(f"# trace: {' '.join(argv[3:])}: {wall:.1f} s; " + " / ".join(done.stdout.strip().splitlines()[1:2]))
    return prefix.parent


def in_process(trace_dir: Path, topology, ecmp_samples: int | None) -> str:
    """The same estimate in this process, the trace read and the model timed apart (CPU includes the draws'
    workers), then the problem's size."""
    from astra_adapter.fabric.estimate import estimate_fabric
    from astra_adapter.fabric.flows import ECMP_SAMPLES
    from genie.workloads.loader import load_trace

    c0, w0 = time.process_time(), time.perf_counter()
    trace = load_trace(trace_dir)
    c1, w1 = time.process_time(), time.perf_counter()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    est = estimate_fabric(trace, topology, ecmp_samples=ECMP_SAMPLES if ecmp_samples is None else ecmp_samples)
    w2, after = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - c1 + after.ru_utime - children.ru_utime + after.ru_stime - children.ru_stime
    line = (f"in process: trace read {w1 - w0:.1f} s wall / {c1 - c0:.1f} s CPU; fabric model {w2 - w1:.1f} s "
            f"wall / {cpu:.1f} s CPU "
            f"(ECMP: {len(est.draw_iterations_ns) or 1} play(s)); iteration {est.iteration_ns} ns")
    return line + "\nsize: " + count_size(trace, topology)


def count_size(trace, topology) -> str:
    """Ranks, nodes, link directions and the flows one play runs (every op's schedule, step by step)."""
    from astra_adapter.fabric.flows import StepSends
    from astra_adapter.fabric.network import FabricNetwork
    from astra_adapter.timeline import CompiledTrace

    compiled = CompiledTrace(trace)
    sends = StepSends()
    flows = steps = 0
    for members, _sides, op in compiled.ops.values():
        for step in sends.of(op, members):
            flows += len(step.src)
            steps += 1
    nodes = sum(len(r.nodes) for r in trace.ranks)
    network = FabricNetwork(topology)
    return (f"{trace.num_ranks} ranks, {nodes} trace nodes, {len(compiled.ops)} communication ops, {steps} "
            f"op steps, {flows} flows per play; {len(topology.hosts)} hosts, {len(topology.switches)} routers, "
            f"{len(network.resources)} link directions")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--ep", type=int, default=8)
    parser.add_argument("--routing-skew", type=float, default=1.0, help="Zipf exponent of expert popularity")
    parser.add_argument("--layers", type=int, help="transformer layers (default: the model's)")
    parser.add_argument("--out", type=Path, help="keep the trace, topology and estimates here (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=1, help="time the estimate this many times (median)")
    parser.add_argument("--in-process", action="store_true",
                        help="also time the trace read and the model apart in this process, and count the flows")
    parser.add_argument("--ecmp-samples", type=int, help="in process: ECMP hash draws (default: the CLI's)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from genie.topology.writer import dump_topology

    with tempfile.TemporaryDirectory(prefix="fabric-speed-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        topology = topology_for(args.ranks)
        topo_path = out / "three-tier.yaml"
        topo_path.write_text(dump_topology(topology))
        trace_dir = out / "moe" if (out / "moe" / "moe.0.et").exists() else \
            generate(out, args.ranks, args.ep, args.routing_skew, args.layers)
        walls, cpus = [], []
        for k in range(args.repeat):
            load = os.getloadavg()[0]
            done, wall, cpu = _run(genie_argv("estimate", str(trace_dir), "--topology", str(topo_path), "--mode",
                                              "fabric", "--out", str(out / f"estimate-{k}")))
            if done.returncode:
                print(f"genie estimate failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
                return 1
            walls.append(wall)
            cpus.append(cpu)
            first = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
            print(f"estimate {k}: {wall:.1f} s wall, {cpu:.1f} s CPU (with its draw workers); load "
                  f"{load:.1f}/{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {first}")
        print(f"fabric model, MoE EP{args.ep} (routing skew {args.routing_skew:g}) at {args.ranks} ranks on 3 "
              f"tiers: `genie estimate --mode fabric` median {median(walls):.1f} s wall, {median(cpus):.1f} s CPU "
              f"over {len(walls)} run(s) (target < 60 s)")
        if args.in_process:
            print(in_process(trace_dir, topology, args.ecmp_samples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
