"""A Hydra app, as pytorch/examples' minGPT-ddp is one: rank 1 raises at step 4, and Hydra
catches it, prints a trimmed traceback, then "Set the environment variable HYDRA_FULL_ERROR=1
for a complete stack trace." and exits with status 1. The truth: rank 1, an exception
(ValueError), not the exit status and not Hydra's trailer.

    torchrun --nproc-per-node=2 hydra_app_raises.py
"""

import sys
import time
from datetime import timedelta

import hydra
import torch
import torch.distributed as dist
from omegaconf import DictConfig


def batch(rank: int, step: int) -> torch.Tensor:
    if rank == 1 and step == 4:
        raise ValueError(f"shard {rank}: batch {step} holds no samples")
    return torch.ones(1)


@hydra.main(version_base=None)
def main(cfg: DictConfig) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    for step in range(1, 30):
        t = batch(rank, step)
        dist.all_reduce(t)
        print(f"step {step}", flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    # Hydra writes outputs/DATE/TIME/ and a log file where it starts: here, nothing written.
    sys.argv += ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout"]
    main()
