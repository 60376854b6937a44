"""A test job for `genie trace capture --warmup 0`: tensor parallelism on 2x2 ranks (TP pairs {0,1}, {2,3}; DP
pairs {0,2}, {1,3}, all four `new_group`s made after init_process_group, as Megatron does). Per step: the TP
leader broadcasts the batch to its pair; forward and backward all-reduce activations and gradients on the TP
pair (2 + 2); the DP pair all-reduces the two weights' gradients (2): 6 subgroup all-reduces per rank, and one
world all-reduce of the loss. Each rank writes every step's communication as it issued it ([type, bytes, group
ranks, peer or root]) to $JOB_REPORT_DIR/calls.<rank>.<step>.json."""
import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
tp_ranks = [[0, 1], [2, 3]]
dp_ranks = [[0, 2], [1, 3]]
tp_groups = [dist.new_group(r) for r in tp_ranks]  # every rank makes every group, in the same order
dp_groups = [dist.new_group(r) for r in dp_ranks]
tp, tp_mine = tp_groups[rank // 2], tp_ranks[rank // 2]
dp, dp_mine = dp_groups[rank % 2], dp_ranks[rank % 2]
torch.manual_seed(rank)
w1 = torch.nn.Parameter(torch.randn(32, 16) * 0.1)  # column-parallel shard
w2 = torch.nn.Parameter(torch.randn(16, 32) * 0.1)  # row-parallel shard
opt = torch.optim.SGD([w1, w2], lr=0.01)
for step in range(4):
    calls = []
    x = torch.randn(8, 32)
    dist.broadcast(x, src=tp_mine[0], group=tp)
    calls.append(["broadcast", x.numel() * 4, tp_mine, tp_mine[0]])  # the root (global rank) in the last field
    h = x @ w1
    dist.all_reduce(h.detach(), group=tp)  # stands in for the sequence-parallel gather
    calls.append(["all_reduce", h.numel() * 4, tp_mine, None])
    y = torch.relu(h) @ w2
    out = y.detach().clone()
    dist.all_reduce(out, group=tp)  # row-parallel output
    calls.append(["all_reduce", out.numel() * 4, tp_mine, None])
    loss = (y * out).sum()
    loss.backward()
    for _ in range(2):  # the input gradients of each parallel layer, on the TP pair
        dist.all_reduce(torch.ones(8, 16), group=tp)
        calls.append(["all_reduce", 8 * 16 * 4, tp_mine, None])
    for p in (w1, w2):
        dist.all_reduce(p.grad, group=dp)
        calls.append(["all_reduce", p.grad.numel() * 4, dp_mine, None])
    total = loss.detach().reshape(1)
    dist.all_reduce(total)
    calls.append(["all_reduce", 4, list(range(world)), None])
    with open(os.path.join(os.environ["JOB_REPORT_DIR"], f"calls.{rank}.{step}.json"), "w") as f:
        json.dump(calls, f)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
