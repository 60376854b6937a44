"""A test job for `genie trace capture`: the rooted collectives and a barrier: broadcast, reduce, gather and
scatter with roots other than rank 0, on the world and on a `new_group` of ranks [1, 2, 3], and a barrier on
each. Each rank writes every step's communication as it issued it ([type, bytes in ASTRA-sim's comm_size
meaning, group ranks, root (global rank) or None]) to $JOB_REPORT_DIR/calls.<rank>.<step>.json; the sizes
differ per collective so that a wrong pairing shows."""
import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), list(range(dist.get_world_size()))
trio_ranks = [1, 2, 3]
trio = dist.new_group(trio_ranks)
w = torch.nn.Parameter(torch.ones(16))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(5):
    calls = []
    (w * 2).sum().backward()
    dist.broadcast(w.grad, src=2)
    calls.append(["broadcast", 64, world, 2])
    dist.reduce(torch.ones(24), dst=1)
    calls.append(["reduce", 96, world, 1])
    piece = torch.ones(10)
    dist.gather(piece, [torch.empty(10) for _ in world] if rank == 3 else None, dst=3)
    calls.append(["gather", 40, world, 3])
    out = torch.empty(6)
    dist.scatter(out, [torch.ones(6) for _ in world] if rank == 0 else None, src=0)
    calls.append(["scatter", 24, world, 0])
    dist.barrier()
    calls.append(["barrier", 0, world, None])
    if rank in trio_ranks:
        dist.reduce(torch.ones(12, dtype=torch.float64), dst=3, group=trio)
        calls.append(["reduce", 96, trio_ranks, 3])
        dist.scatter(torch.empty(5), [torch.ones(5) for _ in trio_ranks] if rank == 2 else None, src=2, group=trio)
        calls.append(["scatter", 20, trio_ranks, 2])
        dist.gather(torch.ones(3), [torch.empty(3) for _ in trio_ranks] if rank == 1 else None, dst=1, group=trio)
        calls.append(["gather", 12, trio_ranks, 1])
        dist.barrier(group=trio)
        calls.append(["barrier", 0, trio_ranks, None])
    with open(os.path.join(os.environ["JOB_REPORT_DIR"], f"calls.{rank}.{step}.json"), "w") as f:
        json.dump(calls, f)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
