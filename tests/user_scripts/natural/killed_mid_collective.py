"""A peer killed from outside mid-collective: at step 5 something outside rank 1 (the OOM
killer, an operator's kill -9) ends it while its peer waits in the all-reduce. Here a process
it started does the killing. The truth: rank 1, killed (SIGKILL).

    torchrun --nproc-per-node=2 killed_mid_collective.py
"""

import os
import subprocess
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
for step in range(1, 30):
    if rank == 1 and step == 5:
        subprocess.Popen(["sh", "-c", f"sleep 0.05; kill -9 {os.getpid()}"])
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.1)
