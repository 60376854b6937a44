"""A test job for `genie trace capture`: MoE token routing with uneven all-to-alls (all-to-allv). Each step every
rank sends a different number of tokens to each expert rank (`all_to_all_single` with input/output split
sizes, then the combine back with the splits swapped) and one all-reduce (gloo's list-form `all_to_all` needs
equal sizes). Each rank writes every step's communication as it issued it ([type, bytes (the rank's
input), group ranks, bytes sent to each group member, bytes received from each]) to
$JOB_REPORT_DIR/calls.<rank>.<step>.json."""
import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ranks = list(range(world))
HIDDEN = 8  # float32 features per token: a token is 32 bytes
w = torch.nn.Parameter(torch.ones(HIDDEN))
opt = torch.optim.SGD([w], lr=0.1)


def tokens(src: int, dst: int, step: int) -> int:
    """Tokens rank src routes to expert rank dst at a step: skewed, and 0 for some pairs."""
    return (src * 3 + dst * 5 + step) % 7


for step in range(4):
    calls = []
    send = [tokens(rank, j, step) for j in ranks]
    recv = [tokens(j, rank, step) for j in ranks]
    x = torch.ones(sum(send), HIDDEN) * w
    routed = torch.empty(sum(recv), HIDDEN)
    dist.all_to_all_single(routed, x.detach(), output_split_sizes=recv, input_split_sizes=send)
    calls.append(["all_to_all", sum(send) * HIDDEN * 4, ranks, [t * HIDDEN * 4 for t in send],
                  [t * HIDDEN * 4 for t in recv]])
    back = torch.empty(sum(send), HIDDEN)
    dist.all_to_all_single(back, routed, output_split_sizes=send, input_split_sizes=recv)
    calls.append(["all_to_all", sum(recv) * HIDDEN * 4, ranks, [t * HIDDEN * 4 for t in recv],
                  [t * HIDDEN * 4 for t in send]])
    (x * back).sum().backward()
    dist.all_reduce(w.grad)
    calls.append(["all_reduce", HIDDEN * 4, ranks, None, None])
    with open(os.path.join(os.environ["JOB_REPORT_DIR"], f"calls.{rank}.{step}.json"), "w") as f:
        json.dump(calls, f)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
