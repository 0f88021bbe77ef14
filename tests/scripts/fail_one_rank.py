"""One rank fails in the way asked for, mid-training; the others are in an all-reduce when it does.

lab run fail_one_rank.py --rank 1 --how raise|kill|exit|hang [--timeout 5]
"""

import argparse
import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, default=1)
parser.add_argument("--how", choices=("raise", "kill", "exit", "hang", "oom"), default="raise")
parser.add_argument("--timeout", type=float, default=10)
args = parser.parse_args()

dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
for step in range(1000):
    if dist.get_rank() == args.rank and step == 5:
        if args.how == "raise":
            raise ValueError(f"bad batch at step {step}")
        if args.how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if args.how == "exit":
            raise SystemExit(3)
        if args.how == "oom":
            # The test moves this pid into its memory cgroup (a netns host has no cgroups in its /sys).
            with open(os.environ["FAIL_OOM_PIDFILE"], "w") as pidfile:
                pidfile.write(str(os.getpid()))
            for _ in range(300):
                if "tlab-test-oom" in open("/proc/self/cgroup").read():
                    break
                time.sleep(0.1)
            hoard = [bytearray(64 * 2**20) for _ in range(1000)]  # far past the cgroup's limit
        time.sleep(3600)  # hang: never enters the next all-reduce
    grad = torch.ones(2)
    dist.all_reduce(grad)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
