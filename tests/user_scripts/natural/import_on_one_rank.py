"""An import that fails on one rank only: rank 1 picks an optional backend at step 3 that is
not installed there. The truth: rank 1, an exception (ModuleNotFoundError), at step 3.

    torchrun --nproc-per-node=2 import_on_one_rank.py
"""

import importlib
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
for step in range(1, 30):
    if rank == 1 and step == 3:
        importlib.import_module("fast_kernels_not_installed")
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
