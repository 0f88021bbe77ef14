"""A collective with mismatched shapes: each rank all-reduces its per-class counts, and rank 1's
shard holds a class the others lack, so its tensor is one longer. The truth: no one rank is at
fault first (both call the same collective with different sizes), the class a mismatch.

    torchrun --nproc-per-node=2 mismatched_shapes.py
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
for step in range(1, 30):
    classes = 10 if rank == 1 and step >= 5 else 9  # rank 1 meets class 9 at step 5
    counts = torch.ones(classes)
    dist.all_reduce(counts)
    print(f"step {step} counted {counts.sum().item():.0f}", flush=True)
    time.sleep(0.05)
