"""An early return on one rank: rank 0 stops evaluating after step 5 (a condition meant for
logging that ends its loop) while rank 1 trains on. The truth: rank 0 left first, at step 5.

    torchrun --nproc-per-node=2 early_return.py
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def train(rank: int) -> None:
    for step in range(1, 40):
        t = torch.ones(2) * step
        dist.all_reduce(t)
        print(f"step {step}", flush=True)
        if rank == 0 and step == 5:
            return  # meant: log once and go on


dist.init_process_group("gloo", timeout=timedelta(seconds=15))
train(dist.get_rank())
dist.destroy_process_group()
