"""A read that blocks for ever on one rank: rank 1 waits at step 5 for a line from a helper
process it started, which never writes one. The truth: rank 1, hung.

    torchrun --nproc-per-node=2 blocking_read.py
"""

import subprocess
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
for step in range(1, 30):
    if rank == 1 and step == 5:
        helper = subprocess.Popen(["sleep", "600"], stdout=subprocess.PIPE)
        helper.stdout.readline()  # it never writes
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
