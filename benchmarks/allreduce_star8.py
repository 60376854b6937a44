"""Foundation benchmark (run by hand, not a test): 8-rank star, every link 1 Gbit/s HTB, all-reduce 1 KiB..64 MiB.

Prints, per size, the ring all-reduce busbw and its ratio to the TCP payload limit at 1 Gbit/s
(1448/1514 x 0.125 GB/s = 0.1196 GB/s), and the 1 KiB latency of every all-reduce algorithm plus AUTO's
per-size choice. Medians over iterations; everything measured side by side in one run.

    sudo .venv/bin/python benchmarks/allreduce_star8.py [--max-bytes 64M] [--iters 10]
"""

from __future__ import annotations

import argparse
import sys

from genie.collectives.registry import supported_algorithms
from genie.core.collective import Algorithm, Collective
from genie.core.topology import LinkShape
from genie.core.units import parse_size_bytes
from genie.services.bench import BenchRequest, run_bench
from genie.services.target import placements_for
from genie.testbed import service
from genie.topology.builders import star

PAYLOAD_LIMIT_GBPS = 1448 / 1514 * 0.125


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-bytes", default="64M")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--spin-us", type=int, default=None)
    args = parser.parse_args()
    topology = star(8, shape=LinkShape(rate_bps=1_000_000_000), name="bench-star8")
    extra = {} if args.spin_us is None else {"spin_us": args.spin_us}
    with service.temporary_testbed(topology) as info:
        placements = placements_for(info, None)
        ring = run_bench(BenchRequest(collectives=(Collective.ALL_REDUCE,), algorithm=Algorithm.RING,
                                      min_bytes=1024, max_bytes=parse_size_bytes(args.max_bytes), factor=4,
                                      iterations=args.iters, warmup=2, **extra), placements)
        small = {}
        for algorithm in (Algorithm.AUTO, *supported_algorithms(Collective.ALL_REDUCE)):
            out = run_bench(BenchRequest(collectives=(Collective.ALL_REDUCE,), algorithm=algorithm, min_bytes=1024,
                                         max_bytes=1024, iterations=200, warmup=20, **extra), placements)
            small[algorithm] = out.stats[0]
    print("# ring all-reduce, 8 ranks, star, 1 Gbit/s HTB links")
    print(f"# {'size_B':>10} {'time_us':>12} {'busbw_GBps':>11} {'busbw/limit':>11}")
    for s in ring.stats:
        print(f"  {s.size_bytes:>10} {s.time_median_us:>12.1f} {s.busbw_GBps:>11.4f} "
              f"{s.busbw_GBps / PAYLOAD_LIMIT_GBPS:>11.3f}")
    print("# 1 KiB all-reduce latency, 8 ranks (median / p99 over 200 iterations)")
    for algorithm, s in small.items():
        label = f"auto->{s.algorithm.value}" if algorithm is Algorithm.AUTO else algorithm.value
        print(f"  {label:>28} {s.time_median_us:>10.1f} us {s.time_p99_us:>10.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
