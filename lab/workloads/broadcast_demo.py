"""The lesson's broadcast demonstration: DDP copies rank 0's weights at construction.

Run it (from the repository root, in the project's venv):

    torchrun --nproc-per-node=2 lab/workloads/broadcast_demo.py

Each rank seeds its generator with its own rank, so the layers start different.
Wrapping the model in DDP broadcasts rank 0's parameters to everyone:

    rank 0 weight[0][0] before DDP -0.0037 after DDP -0.0037
    rank 1 weight[0][0] before DDP +0.2576 after DDP -0.0037
"""

import torch
import torch.nn as nn

from lab.workloads.distributed import ddp, process_group, say


def main() -> None:
    with process_group() as ctx:
        torch.manual_seed(ctx.rank)  # deliberately different on every rank
        layer = nn.Linear(4, 1).to(ctx.device)
        before = layer.weight[0][0].item()
        ddp(layer, ctx)  # construction broadcasts rank 0's parameters and buffers
        after = layer.weight[0][0].item()
        say(f"rank {ctx.rank} weight[0][0] before DDP {before:+.4f} after DDP {after:+.4f}")


if __name__ == "__main__":
    main()
