"""A test job that never makes a step (it waits for a rank that never joins the barrier)."""
import time

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    time.sleep(3600)
dist.barrier()
