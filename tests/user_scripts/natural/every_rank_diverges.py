"""Every rank diverges at once: the learning rate is far too high, the loss turns NaN on every
rank at the same step, and each rank's own check raises. No rank failed first: the truth is
"every rank, diverged, at one step".

    torchrun --nproc-per-node=2 every_rank_diverges.py
"""

import math
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e6)
for step in range(1, 100):
    x = torch.full((4, 8), 10.0)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"rank {rank} step {step} loss {loss.item():.4g}", flush=True)
    if not math.isfinite(loss.item()):
        raise FloatingPointError(f"loss is {loss.item()} at step {step}")
