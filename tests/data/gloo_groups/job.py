"""4-rank gloo jobs on several process groups, traced as Chakra's recipe does (ExecutionTraceObserver + Kineto),
each rank logging its own communication (op, group members) as ground truth.

    OUT_DIR=out JOB=hsdp torchrun --nproc_per_node=4 --master_addr=127.0.0.1 --master_port=29533 job.py

JOB: hsdp (shard groups {0,1},{2,3} + replicate groups {0,2},{1,3}: all-gather, reduce-scatter, all-reduce),
ep_pp (EP groups {0,1},{2,3} = the 2 pipeline stages: even all_to_all_single + send/recv between stages + a world
all-reduce), tp_dp (TP groups {0,1},{2,3} all-reduce + broadcast, DP groups {0,2},{1,3} all-reduce). Ranks are
unevenly loaded (rank-dependent compute), as real ranks are.
"""
import json
import os
import time

import torch
import torch.distributed as dist
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

LOG: list = []
RECORD = [False]


def log(op, group):
    if RECORD[0]:
        LOG.append({"op": op, "ranks": sorted(dist.get_process_group_ranks(group)) if group is not None
                    else list(range(dist.get_world_size()))})


def work(rank, scale=1.0):
    """Compute whose length depends on the rank (an uneven load)."""
    time.sleep(0.002 * (1 + rank) * scale)
    a = torch.ones(64, 64)
    return (a @ a).sum()


def hsdp(rank, g):
    shard, rep = g["shard"], g["rep"]
    for layer in range(2):
        full = torch.empty(2 * 256)
        dist.all_gather_into_tensor(full, torch.full((256,), float(rank)), group=shard)
        log("all_gather", shard)
        work(rank)
    for layer in range(2):
        work(rank, 2)
        out = torch.empty(256)
        dist.reduce_scatter_tensor(out, torch.ones(512), group=shard)
        log("reduce_scatter", shard)
        work(rank if rank % 2 else 3 - rank)
        dist.all_reduce(out, group=rep)
        log("all_reduce", rep)


def ep_pp(rank, g):
    ep = g["ep"]
    stage, peer = rank // 2, (rank + 2) % 4
    x = torch.ones(128)
    if stage == 1:
        dist.recv(x, src=peer)
        log("recv", None)
    for _ in range(2):  # forward: dispatch, combine
        work(rank)
        y = torch.empty(128)
        dist.all_to_all_single(y, x, group=ep)
        log("all_to_all", ep)
    if stage == 0:
        dist.send(x, dst=peer)
        log("send", None)
        dist.recv(x, src=peer)
        log("recv", None)
    for _ in range(2):  # backward
        work(rank)
        y = torch.empty(128)
        dist.all_to_all_single(y, x, group=ep)
        log("all_to_all", ep)
    if stage == 1:
        dist.send(x, dst=peer)
        log("send", None)
    dist.all_reduce(torch.ones(128))
    log("all_reduce", None)


def tp_dp(rank, g):
    tp, dp = g["tp"], g["dp"]
    root = dist.get_process_group_ranks(tp)[0]
    dist.broadcast(torch.ones(64), src=root, group=tp)
    log("broadcast", tp)
    for _ in range(2):
        work(rank)
        dist.all_reduce(torch.ones(256), group=tp)
        log("all_reduce", tp)
    for _ in range(2):
        work(rank, 2)
        dist.all_reduce(torch.ones(256), group=tp)
        log("all_reduce", tp)
    work(rank if rank < 2 else 5 - rank)
    dist.all_reduce(torch.ones(1024), group=dp)
    log("all_reduce", dp)


def groups(job):
    pairs_a, pairs_b = [[0, 1], [2, 3]], [[0, 2], [1, 3]]
    made = {}
    for name, pairs in (("a", pairs_a), ("b", pairs_b)):
        for ranks in pairs:  # every rank creates every group, in the same order
            pg = dist.new_group(ranks)
            if dist.get_rank() in ranks:
                made[name] = pg
    names = {"hsdp": ("shard", "rep"), "ep_pp": ("ep", "other"), "tp_dp": ("tp", "dp")}[job]
    return {names[0]: made["a"], names[1]: made["b"]}


def main():
    job, out_dir = os.environ["JOB"], os.environ["OUT_DIR"]
    dist.init_process_group(backend="gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    g = groups(job)
    step = {"hsdp": hsdp, "ep_pp": ep_pp, "tp_dp": tp_dp}[job]
    os.makedirs(out_dir, exist_ok=True)
    step(rank, g)  # warm-up, untraced
    dist.barrier()
    et = ExecutionTraceObserver()
    et.register_callback(f"{out_dir}/host.{rank}.json")
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(f"{out_dir}/device.{rank}.json"),
                 record_shapes=True, execution_trace_observer=et) as prof:
        for i in range(2):
            RECORD[0] = i == 1
            step(rank, g)
            prof.step()
    RECORD[0] = False
    et.stop()
    et.unregister_callback()
    with open(f"{out_dir}/truth.{rank}.json", "w") as f:
        json.dump(LOG, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
