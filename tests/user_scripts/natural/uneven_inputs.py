"""Uneven inputs, the most common DDP hang: each rank iterates its own shard, and rank 1's is
shorter. It leaves the loop and exits 0 while its peers wait in the next all-reduce, until the
process-group timeout. The truth: rank 1 stopped first (it ran out of data at step 6).

    torchrun --nproc-per-node=2 uneven_inputs.py
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = 6 if rank == 1 else 40  # the data split unevenly across ranks
for step in range(1, batches + 1):
    x = torch.randn(4, 8)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
