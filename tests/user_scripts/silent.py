"""Prints nothing a progress regex would know, and checkpoints into state/ every few iterations.

torchrun --nproc-per-node=2 silent.py --rounds 40
"""

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=40)
parser.add_argument("--round-time", type=float, default=0.25)
args = parser.parse_args()

dist.init_process_group("gloo", timeout=timedelta(seconds=10))
rank = dist.get_rank()
done = 0
if os.path.exists("state/latest.pt"):
    done = torch.load("state/latest.pt", weights_only=True)["done"]
for i in range(done, args.rounds):
    t = torch.ones(1)
    dist.all_reduce(t)
    time.sleep(args.round_time)
    if rank == 0 and i % 4 == 3:
        os.makedirs("state", exist_ok=True)
        torch.save({"done": i + 1}, "state/latest.pt.tmp")
        os.replace("state/latest.pt.tmp", "state/latest.pt")
print("finished", flush=True)
dist.destroy_process_group()
