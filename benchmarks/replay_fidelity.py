"""Workload-replay benchmark (run by hand, not a test).

1. Compute-emulation fidelity: a compute-only trace (a chain of compute nodes per rank) replayed on N ranks;
   prints measured iteration time / critical path (1.000 is perfect) at 8 and 32 ranks.
2. Replay overhead per op: a chain of tiny (4-byte) all-reduces with no compute, so the iteration time is
   nothing but per-op cost (schedule lookup, lane bookkeeping, the messages of one recursive-doubling op).

All ranks on 127.0.0.1 (no testbed, no root needed); medians over iterations.

    .venv/bin/python benchmarks/replay_fidelity.py [--ranks 8 32] [--nodes 20] [--node-ms 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from genie.services.target import loopback_placements
from genie.services.replay import ReplayRequest, run_replay
from genie.measure.replay import iteration_time_ns, rank_summaries
from genie.workloads.analysis import critical_path
from genie.workloads.native import read_native


def chain_trace(ranks: int, nodes: int, node_ms: float) -> str:
    body = [f"  - {{id: {i}, name: c{i}, type: compute, duration: {node_ms}ms"
            + (f", deps: [{i - 1}]}}" if i else "}") for i in range(nodes)]
    return f"format: genie-trace\nversion: 1\nname: chain\nranks: {ranks}\nprogram:\n" + "\n".join(body) + "\n"


def allreduce_chain(ranks: int, ops: int) -> str:
    body = [f"  - {{id: {i}, name: ar{i}, type: all_reduce, size: 4"
            + (f", deps: [{i - 1}]}}" if i else "}") for i in range(ops)]
    return f"format: genie-trace\nversion: 1\nname: ars\nranks: {ranks}\nprogram:\n" + "\n".join(body) + "\n"


def median_iteration_ns(text: str, ranks: int, iterations: int) -> tuple[int, object]:
    trace = read_native(text.encode())
    outcome = run_replay(trace, loopback_placements(ranks), ReplayRequest(iterations=iterations, warmup=1))
    times = [iteration_time_ns(rank_summaries(outcome.programs, it)) for it in outcome.iterations]
    return int(statistics.median(times)), trace


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--node-ms", type=float, default=10.0)
    parser.add_argument("--ops", type=int, default=200)
    args = parser.parse_args()
    print("# compute-emulation fidelity (compute-only chain)")
    print(f"# {'ranks':>5} {'critical_ms':>12} {'measured_ms':>12} {'ratio':>7}")
    for ranks in args.ranks:
        measured, trace = median_iteration_ns(chain_trace(ranks, args.nodes, args.node_ms), ranks, 5)
        crit = critical_path(trace).length_ns
        print(f"  {ranks:>5} {crit / 1e6:>12.2f} {measured / 1e6:>12.2f} {measured / crit:>7.4f}")
    print("# replay overhead per op (chain of 4-byte all-reduces, no compute)")
    print(f"# {'ranks':>5} {'ops':>5} {'per_op_us':>10}")
    for ranks in args.ranks:
        measured, _ = median_iteration_ns(allreduce_chain(ranks, args.ops), ranks, 3)
        print(f"  {ranks:>5} {args.ops:>5} {measured / args.ops / 1e3:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
