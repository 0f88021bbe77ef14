"""What a rank holds under DDP and under FSDP2, and what each one's checkpoint is.

    torchrun --nproc-per-node=2 lab/workloads/shard_memory.py --ckpt-dir /tmp/shards

Every rank builds the same model (seeded), trains it STEPS steps with Adam under DDP, then a
fresh copy under FSDP2 (`fully_shard` on each layer, then the whole), and prints, for each:

- the bytes it holds of parameters, gradients and Adam's state, and the model's whole size;
- the bytes of a layer's weight as that layer's forward saw them (FSDP2 gathers them whole
  for the forward, then frees them);
- its checkpoint: DDP's is one file rank 0 writes (`torch.save` of the state_dict), which every
  rank then reads whole; FSDP2's goes through torch.distributed.checkpoint (DCP), each rank
  writing its own shards and a `.metadata` naming who holds what, so one process alone (another
  world size) loads it into the whole, unsharded model.

The model's checksum (every weight summed, whole) is printed by each rank before saving and
after loading: equal means the checkpoint holds the model the ranks trained.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from lab.nodeenv import NodeEnv
from lab.workloads.distributed import Ctx, ddp, process_group, say
from lab.workloads.sharded import checksum  # every weight summed, whole: the same on every rank

STEPS, WIDTH, LAYERS, BATCH = 3, 256, 4, 16


class Layer(nn.Module):
    """A Linear and a ReLU that remember the largest weight their forward was handed."""

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.seen_bytes = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.linear.weight  # under FSDP2: gathered whole for this forward
        local = weight.to_local() if isinstance(weight, DTensor) else weight
        self.seen_bytes = max(self.seen_bytes, local.numel() * local.element_size())
        return torch.relu(self.linear(x))


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(Layer(WIDTH) for _ in range(LAYERS)))


def local_bytes(tensors) -> int:
    """Bytes of these tensors this process holds (a DTensor's own shard, not the whole)."""
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            held = t.to_local() if isinstance(t, DTensor) else t
            total += held.numel() * held.element_size()
    return total


def train(net: nn.Module, ctx: Ctx) -> torch.optim.Optimizer:
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    torch.manual_seed(100 + ctx.rank)  # every rank its own batch
    for _ in range(STEPS):
        x = torch.randn(BATCH, WIDTH)
        optimizer.zero_grad()
        net(x).pow(2).mean().backward()
        optimizer.step()
    return optimizer


def holds(ctx: Ctx, mode: str, net: nn.Module, optimizer: torch.optim.Optimizer, layers: nn.Sequential) -> None:
    whole = sum(p.numel() * p.element_size() for p in model().parameters())
    params = local_bytes(net.parameters())
    grads = local_bytes(p.grad for p in net.parameters())
    adam = local_bytes(v for state in optimizer.state.values() for v in state.values() if v.dim() > 0)
    seen = max(layer.seen_bytes for layer in layers if isinstance(layer, Layer))
    say(
        f"rank {ctx.rank} {mode} holds params {params} grads {grads} adam {adam} of model {whole} bytes; "
        f"a layer's forward saw {seen} bytes of its weight"
    )


def with_ddp(ctx: Ctx, ckpt: Path) -> None:
    layers = model()
    net = ddp(layers, ctx)
    optimizer = train(net, ctx)
    holds(ctx, "ddp", net, optimizer, layers)
    path = ckpt / "ddp_state_dict.pt"
    if ctx.rank == 0:
        torch.save(layers.state_dict(), path)
    dist.barrier()
    loaded = model()
    loaded.load_state_dict(torch.load(path, weights_only=True))  # every rank reads the whole file
    say(
        f"rank {ctx.rank} ddp checkpoint one file of {path.stat().st_size} bytes, read whole by this rank; "
        f"checksum trained {checksum(layers).hex()} loaded {checksum(loaded).hex()}"
    )


def with_fsdp2(ctx: Ctx, ckpt: Path) -> None:
    layers = model()
    mesh = init_device_mesh("cpu", (ctx.world_size,))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(layers, mesh=mesh)
    optimizer = train(layers, ctx)
    holds(ctx, "fsdp2", layers, optimizer, layers)
    folder = ckpt / "dcp"
    trained = checksum(layers)
    dcp.save(get_model_state_dict(layers), checkpoint_id=str(folder))
    dist.barrier()
    shards = sorted(folder.glob("*.distcp"))
    mine = sum(p.stat().st_size for p in shards if p.name.startswith(f"__{ctx.rank}_"))
    loaded = ""
    if ctx.rank == 0:  # one process, unsharded: a world size of 1
        whole = model().state_dict()
        with warnings.catch_warnings():  # DCP says it assumes one process: that is the point here
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(whole, checkpoint_id=str(folder), no_dist=True)
        summed = sum((float(t.double().sum()) for t in whole.values()), 0.0)  # checksum()'s order: the same sum
        loaded = f" loaded by one process whole {summed.hex()}"
    say(
        f"rank {ctx.rank} fsdp2 checkpoint {len(shards)} shard files and .metadata "
        f"{(folder / '.metadata').exists()}, this rank wrote {mine} bytes; checksum trained {trained.hex()}{loaded}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ckpt-dir", default=NodeEnv.parse().ckpt_dir, help="a folder every rank sees")
    args = p.parse_args()
    if not args.ckpt_dir:
        p.error("--ckpt-dir: a folder every rank sees (the lab's nodes set one)")
    ckpt = Path(args.ckpt_dir) / "shard-memory"
    with process_group() as ctx:
        if ctx.rank == 0:
            ckpt.mkdir(parents=True, exist_ok=True)
        dist.barrier()
        with_ddp(ctx, ckpt)
        with_fsdp2(ctx, ckpt)


if __name__ == "__main__":
    main()
