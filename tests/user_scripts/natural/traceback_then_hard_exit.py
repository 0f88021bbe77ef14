"""A script that prints the traceback itself and leaves with os._exit(2), skipping Python's
shutdown (as some launchers' wrappers do, to not hang in a process group's teardown): rank 1
fails to parse a record at step 4. The truth: rank 1, an exception (json.JSONDecodeError).

    torchrun --nproc-per-node=2 traceback_then_hard_exit.py
"""

import json
import os
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist


def record(rank: int, step: int) -> dict:
    return json.loads('{"x": 1' if (rank == 1 and step == 4) else '{"x": 1}')


def train() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    for step in range(1, 30):
        t = torch.ones(1) * record(rank, step)["x"]
        dist.all_reduce(t)
        print(f"step {step}", flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    try:
        train()
    except Exception:
        traceback.print_exc()
        os._exit(2)
