"""A native crash on one rank: a C extension reads through a bad pointer at step 5 on rank 1
(here ctypes reads address 0). The truth: rank 1, crashed (SIGSEGV).

    torchrun --nproc-per-node=2 segfault_in_extension.py
"""

import ctypes
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
for step in range(1, 30):
    if rank == 1 and step == 5:
        ctypes.string_at(0)
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
