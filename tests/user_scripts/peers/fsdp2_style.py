"""A training script in the style of pytorch/examples' distributed/FSDP2, written for the lab's tests
(its structure, no line copied; CPU and gloo, a small model of a few blocks):

- each block, then the whole model, sharded with fully_shard; an AdamW optimizer;
- a Checkpointer that saves through torch.distributed.checkpoint (get_state_dict, dcp.save) into
  `checkpoints/dcp_api/<time in ns>` every --save-every steps, and at start loads the folder with
  the largest name (the newest) if any, whatever that folder holds;
- progress as `step N loss x` from rank 0; the final weights' sum in result.txt.

    torchrun --nproc-per-node=2 fsdp2_style.py --steps 30
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--save-every", type=int, default=5)
parser.add_argument("--step-time", type=float, default=0.1)
parser.add_argument("--folder", default="checkpoints")


class Checkpointer:
    def __init__(self, folder: str):
        self.folder = os.path.join(folder, "dcp_api")
        found = sorted(os.listdir(self.folder)) if os.path.isdir(self.folder) else []
        self.last_training_time = found[-1] if found else None

    def load(self, model, optimizer) -> int:
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state, "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=os.path.join(self.folder, self.last_training_time))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        return int(state["step"])

    def save(self, model, optimizer, step: int) -> None:
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state, "step": torch.tensor(step)}
        name = torch.tensor(time.time_ns())
        dist.broadcast(name, src=0)  # one folder for every rank's shards
        dcp.save(state, checkpoint_id=os.path.join(self.folder, str(int(name))))


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()) for _ in range(3)]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(32, 8))
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def main():
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    checkpointer = Checkpointer(args.folder)
    start = 0 if checkpointer.last_training_time is None else checkpointer.load(model, optimizer)
    for step in range(start, args.steps):
        generator = torch.Generator().manual_seed(step * 7 + rank)
        x, y = torch.randn(8, 32, generator=generator), torch.randn(8, 8, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.step_time)
        if rank == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
        if (step + 1) % args.save_every == 0:
            checkpointer.save(model, optimizer, step + 1)
    total = sum(p.full_tensor().sum() for p in model.parameters())
    if rank == 0:
        with open("result.txt", "w") as f:
            f.write(f"{float(total):.6f}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
