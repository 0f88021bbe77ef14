"""A job whose ranks stop together on SIGTERM, as a preemption-aware script does: each step an
all-reduce of "was I told to stop?", so every rank ends at the same step, with exit 0. Each rank
says it is ready in its temp dir (ready-RANK), for the test that sends the signal."""

import os
import signal
import tempfile
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

told = torch.zeros(1)
signal.signal(signal.SIGTERM, lambda *_: told.fill_(1.0))
dist.init_process_group("gloo", timeout=timedelta(seconds=20))
rank = dist.get_rank()
print(f"rank {rank} ready", flush=True)
open(os.path.join(tempfile.gettempdir(), f"ready-{rank}"), "w").close()
for step in range(1, 3000):
    flag = told.clone()
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item():
        print(f"rank {rank} stopped at step {step}", flush=True)
        # A signalled agent shutting down never collects a worker's return (torch's worker waits
        # for that before it exits): leave on our own, as lab/workloads/distributed.py's Preemption.
        threading.Timer(1.0, os._exit, (0,)).start()
        break
    time.sleep(0.05)
dist.destroy_process_group()
