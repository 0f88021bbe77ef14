"""A data file missing on one node: every rank opens its own shard, and rank 1's was never
copied. The truth: rank 1, an exception (FileNotFoundError), at its first step.

    torchrun --nproc-per-node=2 missing_data_file.py
"""

import os
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
data = os.path.join(tempfile.gettempdir(), f"natural-shards-{os.getppid()}")
os.makedirs(data, exist_ok=True)
if rank == 0:
    torch.save(torch.ones(16, 4), os.path.join(data, "shard-0.pt"))  # only shard 0 was copied here
time.sleep(0.5)
shard = torch.load(os.path.join(data, f"shard-{rank}.pt"))
for step in range(1, 30):
    total = shard.sum().reshape(1)
    dist.all_reduce(total)
    print(f"step {step} total {total.item():.0f}", flush=True)
    time.sleep(0.05)
