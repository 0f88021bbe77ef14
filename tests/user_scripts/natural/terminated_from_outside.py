"""A rank stopped from outside with SIGTERM (a node's shutdown, a scheduler's preemption of one
process): at step 5 a process outside rank 1 sends it SIGTERM; the script has no handler. The
truth: rank 1, terminated.

    torchrun --nproc-per-node=2 terminated_from_outside.py
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
        subprocess.Popen(["sh", "-c", f"sleep 0.05; kill -TERM {os.getpid()}"])
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.1)
