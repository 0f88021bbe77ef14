"""A setting missing on one node: each rank reads its data path from the environment, set on
node 0's ranks only (here: rank 1 looks for its own variable). The truth: rank 1, an exception
(KeyError) before its first step.

    torchrun --nproc-per-node=2 config_key_missing.py
"""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

os.environ.setdefault("DATA_DIR_RANK0", "/tmp")
dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
data_dir = os.environ[f"DATA_DIR_RANK{rank}"]
for step in range(1, 30):
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step} reading {data_dir}", flush=True)
    time.sleep(0.05)
