"""A script that saves checkpoints but never loads one: after a restart it starts again from step 0.

torchrun --nproc-per-node=2 never_loads.py --steps 30
"""

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--step-time", type=float, default=0.1)
args = parser.parse_args()

dist.init_process_group("gloo", timeout=timedelta(seconds=10))
rank = dist.get_rank()
weights = torch.zeros(4)
os.makedirs("checkpoints", exist_ok=True)
for step in range(args.steps):
    grad = torch.ones(4) * (rank + 1)
    dist.all_reduce(grad)
    weights -= 0.01 * grad
    time.sleep(args.step_time)
    print(f"step {step} loss {weights.sum().item():.3f}", flush=True)
    if rank == 0 and step % 5 == 4:
        torch.save({"weights": weights, "step": step}, f"checkpoints/step{step}.pt")
if rank == 0:
    torch.save(weights, "result.pt")
dist.destroy_process_group()
