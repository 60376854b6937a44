"""One torch.distributed gloo rank of the peers harness (CPU torch; run inside its host's namespace):

    GLOO_SOCKET_IFNAME=eth0 python -m benchmarks.peers.gloo_rank --rank R --world N \
        --init tcp://ADDR:PORT --job JOB.json --out RESULTS.jsonl

Buffers follow nccl-tests' size conventions (float32): all_reduce the buffer (in place), all_gather the total
output (input = size / N), all_to_all the per-rank send buffer (size / N to every rank).
"""

from __future__ import annotations

import argparse
import datetime
import sys

import torch
import torch.distributed as dist

from benchmarks.peers.timing import load_job, timed_loop, write_case


def make_op(collective: str, size_bytes: int, world: int):
    count = size_bytes // 4
    if collective == "all_reduce":
        buf = torch.zeros(count, dtype=torch.float32)
        return lambda: dist.all_reduce(buf)
    if collective == "all_gather":
        inp = torch.zeros(count // world, dtype=torch.float32)
        out = torch.empty(count, dtype=torch.float32)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
        return lambda: gather(out, inp)
    if collective == "all_to_all":
        inp = torch.zeros(count, dtype=torch.float32)
        out = torch.empty(count, dtype=torch.float32)
        return lambda: dist.all_to_all_single(out, inp)
    raise ValueError(f"unsupported collective {collective!r}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--init", required=True, help="tcp://ADDR:PORT of rank 0")
    p.add_argument("--job", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=args.init, rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    out = open(args.out, "a", encoding="utf-8") if args.rank == 0 else None
    try:
        for case in load_job(args.job):
            op = make_op(case["collective"], case["size_bytes"], args.world)
            spans = timed_loop(op, dist.barrier, case["warmup"], case["iterations"])
            del op
            gathered = [None] * args.world if args.rank == 0 else None
            dist.gather_object(spans, gathered, dst=0)
            if out is not None:
                write_case(out, case, gathered)
        dist.barrier()
    finally:
        if out is not None:
            out.close()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
