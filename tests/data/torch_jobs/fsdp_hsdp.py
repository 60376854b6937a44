"""A test job for `genie trace capture`: FSDP2 (`fully_shard`) on a 2x2 DeviceMesh, i.e. HSDP (parameters sharded
over the "shard" dimension, gradients all-reduced over the "replicate" dimension), plus a `new_group` of ranks 0
and 3 that all-reduces the loss. Layer widths are odd so that FSDP pads the shards.

Each step, before the optimizer, every rank writes $JOB_REPORT_DIR/fsdp.<rank>.<step>.json:
- "calls": every collective the job issued, in order, as [type, bytes in ASTRA-sim's comm_size meaning, group
  ranks, peer], recorded by wrapping the torch.distributed functions FSDP2 calls (all_gather_single,
  reduce_scatter_single, all_reduce);
- "units": per FSDP unit (module order) its parameter count and the padded shard it holds, computed by the job
  from its parameter shapes (dim 0 split over the shard dimension, rounded up), and its mesh groups;
- "param_count": the model's parameters;
- "comm_s": the seconds it spent inside those calls and in Work.wait (its time blocked in communication).
  The tests do not assert compute against it: this job's compute is small (25-70 ms a rank against 100-140 ms
  of communication) and its timers wrap capture's own wrappers, so they count ~1.0-1.7 ms more communication
  per step than the trace's ranges (measured on 12 rank-steps: compute +1.8..+14.4% of step minus this);
  compute_comm.py is the job for that check.
"""
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
pair = dist.new_group([0, 3])
calls: list = []
blocked = {"comm_s": 0.0, "depth": 0}


def _timed(fn):
    """fn, its time added to comm_s unless it runs inside another timed call (a blocking call's own wait)."""
    def call(*args, **kwargs):
        t = time.perf_counter()
        blocked["depth"] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            blocked["depth"] -= 1
            if blocked["depth"] == 0:
                blocked["comm_s"] += time.perf_counter() - t

    return call


def _record(kind, size_of):
    fn = getattr(dist, {"all_gather": "all_gather_single", "reduce_scatter": "reduce_scatter_single",
                        "all_reduce": "all_reduce"}[kind])

    def wrapper(*args, **kwargs):
        group = kwargs.get("group")
        ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
        calls.append([kind, size_of(*args, **kwargs), ranks, None])
        return fn(*args, **kwargs)

    return _timed(wrapper)


def _bytes(t):
    return t.numel() * t.element_size()


dist.all_gather_single = _record("all_gather", lambda out, inp, **kw: _bytes(inp))
dist.reduce_scatter_single = _record("reduce_scatter", lambda output, input, **kw: _bytes(input))
dist.all_reduce = _record("all_reduce", lambda tensor, *a, **kw: _bytes(tensor))
dist.Work.wait = _timed(dist.Work.wait)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(64, 127), nn.Linear(127, 130), nn.Linear(130, 33)])
        self.scale = nn.Parameter(torch.ones(33))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            x = torch.relu(x) if i < len(self.layers) - 1 else x
        return x * self.scale


torch.manual_seed(0)
model = Net()
units = [*model.layers, model]  # each Linear is a unit; the root holds `scale`
shapes = [[list(p.shape) for p in (u.parameters() if u is not model else [model.scale])] for u in units]
for layer in model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
shard_size = mesh["shard"].size()
shard_ranks = dist.get_process_group_ranks(mesh["shard"].get_group())
replicate_ranks = dist.get_process_group_ranks(mesh["replicate"].get_group())
unit_report = [{"param_count": sum(math.prod(s) for s in shp),
                "shard_numel": sum(math.ceil(s[0] / shard_size) * math.prod(s[1:]) for s in shp),
                "shard_group": shard_ranks, "replicate_group": replicate_ranks} for shp in shapes]
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    calls.clear()
    blocked["comm_s"] = 0.0
    opt.zero_grad()
    loss = model(torch.randn(16, 64)).square().mean()
    loss.backward()
    if rank in (0, 3):
        dist.all_reduce(loss.detach(), group=pair)
    with open(os.path.join(os.environ["JOB_REPORT_DIR"], f"fsdp.{rank}.{step}.json"), "w") as f:
        json.dump({"calls": calls, "units": unit_report, "comm_s": blocked["comm_s"],
                   "param_count": sum(p.numel() for p in model.parameters())}, f)
    opt.step()
dist.destroy_process_group()
