"""torch's own DataLoader timeout on one rank: rank 1's loader worker waits on a slow source
(a network filesystem that stopped answering) longer than the loader's `timeout=2`. The truth:
rank 1, an exception (torch's "DataLoader timed out after 2 seconds"), not a peer's consequence.

    torchrun --nproc-per-node=2 dataloader_timeout.py
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __init__(self, rank: int):
        self.rank = rank

    def __len__(self) -> int:
        return 200

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.rank == 1 and index >= 20:
            time.sleep(30)  # the file server stopped answering
        return torch.ones(4) * index


dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
loader = DataLoader(Remote(rank), batch_size=4, num_workers=1, timeout=2)
for step, batch in enumerate(loader, 1):
    total = batch.sum().reshape(1)
    dist.all_reduce(total)
    print(f"step {step} total {total.item():.0f}", flush=True)
    time.sleep(0.05)
