"""A barrier only one rank reaches: the save at the end is guarded by `if rank == 0:` and the
barrier meant for every rank went under it by one indent. Rank 1 finishes and exits 0; rank 0
waits in the barrier until the process-group timeout. The truth: rank 1 left first (exited 0
while its peer waits), as with uneven inputs.

    torchrun --nproc-per-node=2 barrier_on_one_rank.py
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
for step in range(1, 11):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(0.05)
if rank == 0:
    torch.save(model.module.state_dict(), "/tmp/natural-barrier-model.pt")
    dist.barrier()  # meant for every rank: one indent too far
print(f"rank {rank} done", flush=True)
