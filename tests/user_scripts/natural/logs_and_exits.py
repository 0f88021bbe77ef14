"""A rank that logs its own error and calls sys.exit(1), no traceback: rank 1 finds its data
file missing at step 4. The truth: rank 1, exited with status 1, its log line the reason.

    torchrun --nproc-per-node=2 logs_and_exits.py
"""

import logging
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
for step in range(1, 30):
    if rank == 1 and step == 4:
        logging.error("cannot open shard /data/train-00001.bin: no such file")
        sys.exit(1)
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
