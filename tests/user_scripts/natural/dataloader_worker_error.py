"""An exception inside a DataLoader worker on one rank: rank 1's dataset hits a bad record at
index 17. The truth: rank 1, an exception (ValueError, re-raised by the DataLoader).

    torchrun --nproc-per-node=2 dataloader_worker_error.py
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __init__(self, rank: int):
        self.rank = rank

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.rank == 1 and index == 17:
            raise ValueError(f"record {index} is corrupt")
        return torch.ones(4) * index


dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
loader = DataLoader(Records(rank), batch_size=4, num_workers=1)
for step, batch in enumerate(loader, 1):
    total = batch.sum()
    dist.all_reduce(total)
    print(f"step {step}", flush=True)
