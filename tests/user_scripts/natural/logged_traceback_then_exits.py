"""A script whose entry point logs any exception with its traceback and exits with status 1
(`logging.exception(...)`, then `sys.exit(1)`): rank 1 divides by an empty count at step 4. The
truth: rank 1, an exception (ZeroDivisionError), which the log's traceback shows.

    torchrun --nproc-per-node=2 logged_traceback_then_exits.py
"""

import logging
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

log = logging.getLogger("train")


def train() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    for step in range(1, 30):
        seen = 0 if (rank == 1 and step == 4) else 8
        mean = torch.ones(1) * (8 / seen)
        dist.all_reduce(mean)
        print(f"step {step}", flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        train()
    except Exception:
        log.exception("training failed")
        sys.exit(1)
