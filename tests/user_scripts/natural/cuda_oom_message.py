"""A CUDA out-of-memory error on one rank: rank 1's batch at step 5 is the longest sequence of
the epoch. No GPU here: the script raises what torch raises there, torch.OutOfMemoryError with
its own message (a double of the GPU, nothing else). The truth: rank 1, out of memory.

    torchrun --nproc-per-node=2 cuda_oom_message.py
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
for step in range(1, 30):
    if rank == 1 and step == 5:
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
            "3.12 GiB is free. Of the allocated memory 70.50 GiB is allocated by PyTorch"
        )
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
