"""A test job for `genie trace capture`: two `new_group` subgroups, all_reduce/all_gather on them and on the
world, a send/recv on the world and one on a subgroup, an all_to_all_single. Each rank writes every step's
communication as it issued it ([type, bytes in ASTRA-sim's comm_size meaning, group ranks, peer]) to
$JOB_REPORT_DIR/calls.<rank>.<step>.json."""
import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
mine, mine_ranks = (pairs[0], [0, 1]) if rank < 2 else (pairs[1], [2, 3])
world = list(range(dist.get_world_size()))
w = torch.nn.Parameter(torch.ones(100))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(5):
    calls = []
    (w * 2).sum().backward()
    dist.all_reduce(w.grad, group=mine)
    calls.append(["all_reduce", 400, mine_ranks, None])
    dist.all_reduce(w.grad)
    calls.append(["all_reduce", 400, world, None])
    out = [torch.empty(10) for _ in range(2)]
    dist.all_gather(out, torch.ones(10), group=mine)
    calls.append(["all_gather", 40, mine_ranks, None])
    if rank == 0:
        dist.send(torch.ones(7), 1, tag=3)
        calls.append(["send", 28, world, 1])
    if rank == 1:
        dist.recv(torch.empty(7), 0, tag=3)
        calls.append(["recv", 28, world, 0])
    if rank == 2:
        dist.send(torch.ones(5, dtype=torch.float64), 3, group=mine, tag=1)
        calls.append(["send", 40, mine_ranks, 3])
    if rank == 3:
        dist.recv(torch.empty(5, dtype=torch.float64), 2, group=mine, tag=1)
        calls.append(["recv", 40, mine_ranks, 2])
    a, b = torch.ones(8), torch.empty(8)
    dist.all_to_all_single(b, a)
    calls.append(["all_to_all", 32, world, None])
    with open(os.path.join(os.environ["JOB_REPORT_DIR"], f"calls.{rank}.{step}.json"), "w") as f:
        json.dump(calls, f)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
