"""A test job for `genie trace capture` whose compute and communication the job times itself: per step, torch
compute (a chain of matmuls, longer on odd ranks), a blocking all_reduce, pure-Python compute (no torch op: only
the gaps between ops show it), an asynchronous all_reduce overlapped with matmuls and then waited for, a
blocking all_gather_into_tensor, a small backward. Each rank writes, before the optimizer step,
$JOB_REPORT_DIR/times.<rank>.<step>.json: the seconds it spent in its torch.distributed calls and waits
("comm_s"), in its compute phases ("compute_s", of which "python_s" pure Python), and since the step began
("step_s")."""
import json
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
a = torch.randn(128, 128) / 16
w = torch.nn.Parameter(torch.zeros(128))
opt = torch.optim.SGD([w], lr=0.1)
buf, buf2 = torch.ones(64 * 1024), torch.ones(32 * 1024)
shard, gathered = torch.ones(4096), torch.empty(4096 * world)
slow = 1 + rank % 2


def matmuls(n: int) -> None:
    x = a
    for _ in range(n):
        x = torch.tanh(a @ x)


def python_loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


times: dict[str, float] = {}


def timed(kind: str, fn):
    t = time.perf_counter()
    out = fn()
    times[kind] += time.perf_counter() - t
    return out


for step in range(5):
    times.update(comm_s=0.0, compute_s=0.0, python_s=0.0)
    begun = time.perf_counter()
    opt.zero_grad()
    timed("compute_s", lambda: matmuls(160 * slow))
    timed("comm_s", lambda: dist.all_reduce(buf))
    t0 = time.perf_counter()
    timed("compute_s", lambda: python_loop(240000 * slow))
    times["python_s"] += time.perf_counter() - t0
    work = timed("comm_s", lambda: dist.all_reduce(buf2, async_op=True))
    timed("compute_s", lambda: matmuls(120))
    timed("comm_s", work.wait)
    timed("comm_s", lambda: dist.all_gather_into_tensor(gathered, shard))
    timed("compute_s", lambda: (w * (a @ a).sum(0)).sum().backward())
    with open(os.path.join(os.environ["JOB_REPORT_DIR"], f"times.{rank}.{step}.json"), "w") as f:
        json.dump(dict(times, step_s=time.perf_counter() - begun), f)
    opt.step()
dist.destroy_process_group()
