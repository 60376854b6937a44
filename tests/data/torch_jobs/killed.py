"""A test job whose rank 2 is killed by a signal (SIGKILL) before any step: no Python error of its own."""
import os
import signal

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 2:
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
