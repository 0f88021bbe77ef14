"""Checkpoints with torch.distributed.checkpoint (a folder per save, every rank writes its part),
and loads the newest at start. It reports its step with the lab's optional helper.

    torchrun --nproc-per-node=2 dcp_checkpoint.py --steps 30

It loads the newest folder whose .metadata was written; --newest-folder loads the newest folder
whatever it holds (a save cut short leaves one without its .metadata).
"""

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

try:
    from lab.progress import step as report_step
except ImportError:  # outside the lab

    def report_step(n, unit="step"):
        pass


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--step-time", type=float, default=0.1)
parser.add_argument("--every", type=int, default=5)
parser.add_argument("--newest-folder", action="store_true")
args = parser.parse_args()

dist.init_process_group("gloo", timeout=timedelta(seconds=10))
rank = dist.get_rank()
state = {"weights": torch.zeros(4), "step": torch.tensor(0)}


def complete_saves():
    """Saves whose .metadata was written: a rank killed inside dcp.save leaves a folder without it."""
    if not os.path.isdir("ckpt"):
        return []
    whole = (lambda d: True) if args.newest_folder else (lambda d: os.path.exists(f"ckpt/{d}/.metadata"))
    done = (d for d in os.listdir("ckpt") if d.startswith("step") and whole(d))
    return sorted(int(d[4:]) for d in done)


saved = complete_saves()
if saved:
    dcp.load(state, checkpoint_id=f"ckpt/step{saved[-1]}")
start = int(state["step"])
for step in range(start, args.steps):
    grad = torch.ones(4)
    dist.all_reduce(grad)
    state["weights"] -= 0.01 * grad
    time.sleep(args.step_time)
    report_step(step)
    if step % args.every == args.every - 1:
        state["step"] = torch.tensor(step + 1)
        dcp.save(state, checkpoint_id=f"ckpt/step{step + 1}")
if rank == 0:
    with open("result.txt", "w") as f:
        f.write(" ".join(f"{w:.6f}" for w in state["weights"].tolist()) + "\n")
dist.destroy_process_group()
