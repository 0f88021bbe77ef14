"""A deadlock between two threads on one rank: rank 1's metrics thread takes the log lock then
the stats lock, its training loop the other way round, and at step 5 they meet. Its threads
still run (no GIL held), its peer waits in the all-reduce until the process-group timeout. The
truth: rank 1, hung.

    torchrun --nproc-per-node=2 thread_deadlock.py
"""

import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank = dist.get_rank()
log_lock, stats_lock = threading.Lock(), threading.Lock()


def report():
    with log_lock:
        time.sleep(0.2)
        with stats_lock:
            pass


for step in range(1, 30):
    if rank == 1 and step == 5:
        threading.Thread(target=report, daemon=True).start()
        with stats_lock:
            time.sleep(0.1)
            with log_lock:  # the metrics thread holds it, and waits for stats_lock
                pass
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
