"""Which samples each rank sees: the same data everywhere, or a DistributedSampler's share.

    torchrun --nproc-per-node=2 lab/workloads/data_split.py [--sampler]

Every rank goes through one epoch of a 64-sample dataset; rank 0 gathers the indices
every rank saw and prints how many were seen more than once (by different ranks).
"""

import argparse
from collections import Counter

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from lab.workloads.distributed import process_group, say

SAMPLES = 64


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sampler", action="store_true", help="give each rank its own share (the fix)")
    args = p.parse_args()
    with process_group() as ctx:
        dataset = TensorDataset(torch.arange(SAMPLES))
        sampler: DistributedSampler | None = (
            DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank) if args.sampler else None
        )
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        seen = [int(i) for (batch,) in loader for i in batch]
        everyone: list[list[int]] = [[] for _ in range(ctx.world_size)]
        dist.all_gather_object(everyone, seen)
        if ctx.rank == 0:
            counts = Counter(i for indices in everyone for i in indices)
            total = sum(counts.values())
            say(
                f"seen {total} unique {len(counts)} duplicates {total - len(counts)} "
                f"({'DistributedSampler' if args.sampler else 'no sampler'}, {ctx.world_size} ranks)"
            )


if __name__ == "__main__":
    main()
