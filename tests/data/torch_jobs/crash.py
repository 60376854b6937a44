"""A test job that fails on rank 1 before any step."""
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise RuntimeError("boom: rank 1 fell over")
dist.barrier()
