"""Checkpoints named by step, and a `latest` file that names the newest, read at start: a pattern
many training loops use so that a restart finds its checkpoint without listing a folder.

    torchrun --nproc-per-node=2 latest_marker.py --steps 40

Rank 0 saves ckpt/step_N.pt every --every steps and writes N into ckpt/latest. By default it
moves the marker first, then saves (the order a hurried script has: the marker names a step
whose file may not be whole yet); --marker-last saves, then moves the marker. Every rank
loads the step the marker names at start. It prints "step N" and writes result.txt at the end.
Written for the lab's tests as a user would write it: it knows nothing of the lab.
"""

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--every", type=int, default=5)
parser.add_argument("--step-time", type=float, default=0.1)
parser.add_argument("--marker-last", action="store_true", help="move ckpt/latest only after the save")
args = parser.parse_args()

dist.init_process_group("gloo", timeout=timedelta(seconds=10))
rank = dist.get_rank()
torch.manual_seed(0)
weights = torch.zeros(64)
first = 0
if os.path.exists("ckpt/latest"):
    with open("ckpt/latest") as f:
        named = int(f.read())
    state = torch.load(f"ckpt/step_{named}.pt", weights_only=True)
    weights, first = state["weights"], state["step"]
    print(f"rank {rank}: resumed from step {first}", flush=True)


def mark(step: int) -> None:
    with open("ckpt/latest", "w") as f:
        f.write(str(step))


def checkpoint(step: int) -> None:
    os.makedirs("ckpt", exist_ok=True)
    if not args.marker_last:
        mark(step)
    torch.save({"weights": weights, "step": step}, f"ckpt/step_{step}.pt")
    if args.marker_last:
        mark(step)


for step in range(first, args.steps):
    grad = torch.full((64,), float(step % 7))
    dist.all_reduce(grad)
    weights -= 0.001 * grad
    time.sleep(args.step_time)
    print(f"step {step + 1}", flush=True)
    if rank == 0 and (step + 1) % args.every == 0:
        checkpoint(step + 1)
if rank == 0:
    with open("result.txt", "w") as f:
        f.write(" ".join(f"{w:.6f}" for w in weights.tolist()) + "\n")
dist.destroy_process_group()
