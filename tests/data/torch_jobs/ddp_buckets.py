"""A test job for `genie trace capture`: DDP of a 4-layer MLP with 1 MiB buckets (several all-reduces per step).
Each step, before the optimizer, rank 0 writes what DDP reports (bucket sizes after the rebuild, parameters) to
$JOB_REPORT_DIR/ddp.<step>.json."""
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(1 + dist.get_rank())
model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512),
                          nn.ReLU(), nn.Linear(512, 10)), bucket_cap_mb=1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(torch.randn(64, 256)), torch.randint(0, 10, (64,)))
    loss.backward()
    if dist.get_rank() == 0:
        info = model._get_ddp_logging_data()
        report = {"rebuilt_bucket_sizes": [int(x) for x in str(info.get("rebuilt_bucket_sizes", "")).split(",") if x],
                  "param_count": sum(p.numel() for p in model.parameters())}
        with open(os.path.join(os.environ["JOB_REPORT_DIR"], f"ddp.{step}.json"), "w") as f:
            json.dump(report, f)
    opt.step()
dist.destroy_process_group()
