"""The lesson's first DDP run: three SGD steps, every rank ends with the same weights.

Run it (from the repository root, in the project's venv):

    torchrun --nproc-per-node=2 lab/workloads/ddp_train.py
    lab run --nodes 2 --nproc-per-node 2 lab/workloads/ddp_train.py   # two hosts

With 2 processes it prints (rank 0 prints the loss; every rank prints its checksum):

    step 0 loss 1.0865
    step 1 loss 0.9100
    step 2 loss 0.8038
    rank 0 local_rank 0 host ... checksum -4.635064 (-0x1.28a6f...p+2)
    rank 1 local_rank 1 host ... checksum -4.635064 (-0x1.28a6f...p+2)

The checksum is the sum of the first layer's weights. It is identical on every rank
because DDP averages the gradients before each step. With 4 processes (1x4 or 2x2)
every rank prints -4.676729: a different world size averages different data.
The hex form is the exact float, to compare runs bit for bit. With --no-ddp each rank
trains its copy on its own batch and the checksums drift apart.
"""

import sys

import torch
import torch.nn as nn

from lab.workloads.distributed import Ctx, ddp, process_group, say

STEPS = 3


def main() -> None:
    # --no-ddp: the lesson's counter-example, every rank training its own copy alone.
    use_ddp = "--no-ddp" not in sys.argv[1:]
    with process_group() as ctx:
        train(ctx, use_ddp)  # in its own function, so the DDP model is freed before the group is destroyed


def train(ctx: Ctx, use_ddp: bool = True) -> None:
    torch.manual_seed(0)  # the model's seed: same on every rank (DDP broadcasts rank 0's anyway)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1)).to(ctx.device)
    ddp_model = ddp(model, ctx) if use_ddp else model
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    loss_fn = nn.MSELoss()

    torch.manual_seed(100 + ctx.rank)  # the data's seed: each rank sees its own batch
    x = torch.randn(16, 10).to(ctx.device)
    y = torch.randn(16, 1).to(ctx.device)

    for step in range(STEPS):
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(x), y)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        optimizer.step()
        if ctx.rank == 0:
            say(f"step {step} loss {loss.item():.4f}")

    checksum = float(model[0].weight.sum().item())  # type: ignore[operator]  # nn.Sequential indexes to Module
    say(f"rank {ctx.rank} local_rank {ctx.local_rank} host {ctx.host} checksum {checksum:.6f} ({checksum.hex()})")


if __name__ == "__main__":
    main()
