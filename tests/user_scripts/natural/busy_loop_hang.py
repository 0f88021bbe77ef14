"""An endless loop in Python on one rank: rank 1's retry loop at step 5 waits for a condition
that never becomes true, spinning. The truth: rank 1, hung.

    torchrun --nproc-per-node=2 busy_loop_hang.py
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
ready = {"token": None}
for step in range(1, 30):
    if rank == 1 and step == 5:
        while ready["token"] is None:  # nothing ever sets it
            time.sleep(0.01)
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
