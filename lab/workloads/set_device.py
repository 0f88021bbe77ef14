"""Where a CUDA tensor lands before and after torch.cuda.set_device (GPU machines only).

    torchrun --nproc-per-node=2 lab/workloads/set_device.py

Each rank prints `rank R before set_device cuda:0 after cuda:LOCAL_RANK`.
"""

import os
import sys

import torch


def main() -> None:
    local_rank, rank = int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"])
    early = torch.ones(1, device="cuda")  # the mistake: made before choosing a device
    torch.cuda.set_device(local_rank)
    late = torch.ones(1, device="cuda")
    sys.stdout.write(f"rank {rank} before set_device {early.device} after {late.device}\n")  # one write a line
    sys.stdout.flush()


if __name__ == "__main__":
    main()
