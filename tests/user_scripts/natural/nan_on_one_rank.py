"""A loss that turns NaN on one rank: rank 1's shard holds a record of infinities at step 7, and
the loop's own check raises. The truth: rank 1, diverged.

    torchrun --nproc-per-node=2 nan_on_one_rank.py
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 30):
    x = torch.randn(4, 8)
    if rank == 1 and step == 7:
        x[0] = float("inf")
    loss = model(x).pow(2).mean()
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss is {loss.item()} at step {step}")
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(0.05)
