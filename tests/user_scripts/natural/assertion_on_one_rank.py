"""An assertion that fails on one rank: rank 1's collate step returns a short last batch at
step 6 and the model's input check says so. The truth: rank 1, an exception (AssertionError).

    torchrun --nproc-per-node=2 assertion_on_one_rank.py
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
for step in range(1, 30):
    batch = torch.ones(3 if rank == 1 and step == 6 else 4, 8)
    assert batch.shape[0] == 4, f"expected a batch of 4, got {batch.shape[0]}"
    total = batch.sum().reshape(1)
    dist.all_reduce(total)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
