"""BatchNorm's running statistics under DDP: buffers are not gradients.

    torchrun --nproc-per-node=2 lab/workloads/bn_buffers.py --mode broadcast   # DDP's default
    torchrun --nproc-per-node=2 lab/workloads/bn_buffers.py --mode local       # broadcast_buffers=False
    torchrun --nproc-per-node=2 lab/workloads/bn_buffers.py --mode sync        # SyncBatchNorm

Each rank trains on its own data (rank r's inputs are centred on r). DDP averages the
gradients, but running_mean and running_var are buffers each rank updates from its own
batch. With broadcast_buffers (the default) DDP copies rank 0's buffers to every rank at
the start of each forward; without it they drift apart; SyncBatchNorm computes the batch
statistics over all ranks' batches. Each rank prints its device and a checksum of
running_mean as its BatchNorm saw it at the start of the last forward, and after training.
"""

import argparse

import torch
import torch.nn as nn

from lab.workloads.distributed import ddp, process_group, say

STEPS = 5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("broadcast", "local", "sync"), required=True)
    args = p.parse_args()
    with process_group() as ctx:
        train(ctx, args.mode)


def train(ctx, mode: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1)).to(ctx.device)
    if mode == "sync":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ddp_model = ddp(model, ctx, broadcast_buffers=(mode != "local"))
    seen: dict[str, torch.Tensor] = {}
    model[1].register_forward_pre_hook(lambda module, inputs: seen.update(mean=module.running_mean.clone()))
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    torch.manual_seed(100 + ctx.rank)
    for _ in range(STEPS):
        x = torch.randn(32, 8, device=ctx.device) + ctx.rank  # every rank's data has its own mean
        optimizer.zero_grad()
        ddp_model(x).pow(2).mean().backward()
        optimizer.step()
    at_forward = float(seen["mean"].sum().item())
    after = float(model[1].running_mean.sum().item())  # type: ignore[operator]  # a BatchNorm buffer
    say(line(ctx.rank, mode, str(ctx.device), at_forward, after))


def line(rank: int, mode: str, device: str, at_forward: float, after: float) -> str:
    """What each rank prints (the buffers lesson reads it back; its tests build GPU runs' lines with it)."""
    seen = f"running_mean at last forward {at_forward.hex()} after training {after.hex()}"
    return f"rank {rank} mode {mode} on {device} {seen}"


if __name__ == "__main__":
    main()
