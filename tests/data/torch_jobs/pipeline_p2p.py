"""A test job for `genie trace capture`: a 2-stage pipeline on 4 ranks (stage 0: ranks 0, 1; stage 1: ranks 2, 3;
rank r of stage 0 feeds rank r + 2), two micro-batches, activations forward and gradients backward with
``dist.batch_isend_irecv([dist.P2POp(dist.isend, ...), ...])`` as PyTorch's docs write it, then each stage's
data-parallel pair all-reduces its gradients on a ``new_group``. Each rank writes every step's communication as
it issued it ([type, bytes, group ranks, peer]) to $JOB_REPORT_DIR/calls.<rank>.<step>.json."""
import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
stage = rank // 2
dp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
dp, dp_ranks = dp_groups[stage], [2 * stage, 2 * stage + 1]
peer = rank + 2 if stage == 0 else rank - 2
all_ranks = list(range(world))
torch.manual_seed(rank)
layer = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(layer.parameters(), lr=0.01)
micro, batch = 2, 8
act_bytes = batch * 16 * 4
for step in range(5):
    calls = []
    acts, outs = [], []
    for m in range(micro):  # forward: stage 0 sends activations, stage 1 receives them
        if stage == 0:
            out = layer(torch.randn(batch, 16))
            outs.append(out)
            ops = [dist.P2POp(dist.isend, out.detach().contiguous(), peer)]
            calls.append(["send", act_bytes, all_ranks, peer])
        else:
            buf = torch.empty(batch, 16)
            ops = [dist.P2POp(dist.irecv, buf, peer)]
            calls.append(["recv", act_bytes, all_ranks, peer])
            acts.append(buf)
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    for m in range(micro):  # backward: stage 1 sends the activations' gradients back
        if stage == 1:
            x = acts[m].requires_grad_(True)
            layer(x).sum().backward()
            ops = [dist.P2POp(dist.isend, x.grad.contiguous(), peer)]
            calls.append(["send", act_bytes, all_ranks, peer])
        else:
            grad = torch.empty(batch, 16)
            ops = [dist.P2POp(dist.irecv, grad, peer)]
            calls.append(["recv", act_bytes, all_ranks, peer])
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        if stage == 0:
            outs[m].backward(grad)
    for p in layer.parameters():  # data parallelism inside each stage
        dist.all_reduce(p.grad, group=dp)
        calls.append(["all_reduce", p.grad.numel() * 4, dp_ranks, None])
    with open(os.path.join(os.environ["JOB_REPORT_DIR"], f"calls.{rank}.{step}.json"), "w") as f:
        json.dump(calls, f)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
