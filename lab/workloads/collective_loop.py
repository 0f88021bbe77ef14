"""A training loop that averages gradients by hand, with one injectable collective bug.

    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc-per-node=2 lab/workloads/collective_loop.py --steps 100
    kill -USR1 <one worker's pid>          # that rank now issues one all-reduce nobody else does

This is the naive version of DDP (one all_reduce per parameter, then divide), kept
next to the real one on purpose. The collective-mismatch exercise uses it rather than
the trainer because, on torch 2.13 (CPU, gloo), constructing DDP with
TORCH_DISTRIBUTED_DEBUG=DETAIL crashes with SIGSEGV in DDP's construction logging,
while plain collectives under DETAIL work and get their desync check.
With DETAIL the bug fails at once: "Detected mismatch between collectives on ranks".
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from lab.health.events import Event, EventLog, ExitReason
from lab.nodeenv import NodeEnv
from lab.workloads.distributed import process_group


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-time", type=float, default=0.1)
    parser.add_argument("--events-dir", default=NodeEnv.parse().events_dir)
    args, _ = parser.parse_known_args()  # accepts the trainer's other flags and ignores them
    armed = []
    signal.signal(signal.SIGUSR1, lambda *_: armed.append(True))
    events = EventLog(args.events_dir, int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)))
    events.write(Event.START)
    try:
        with process_group() as ctx:
            events.write(Event.RENDEZVOUS_DONE, seconds=ctx.rendezvous_seconds, world_size=ctx.world_size)
            torch.manual_seed(0)
            model = nn.Linear(16, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            torch.manual_seed(100 + ctx.rank)
            x, y = torch.randn(8, 16), torch.randn(8, 1)
            for step in range(1, args.steps + 1):
                started = time.perf_counter()
                if armed:
                    armed.clear()
                    events.write(Event.INJECTED_EXTRA_COLLECTIVE, step=step)
                    dist.all_reduce(torch.zeros(3))  # INJECTED BUG: only this rank calls it
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                for p in model.parameters():  # the naive DDP: average every gradient by hand
                    dist.all_reduce(p.grad)
                    p.grad /= ctx.world_size
                optimizer.step()
                time.sleep(max(0.0, args.step_time - (time.perf_counter() - started)))
                events.write(Event.STEP, step=step)
        events.write(Event.EXIT, reason=ExitReason.COMPLETED, step=args.steps)
    except BaseException:
        events.write(Event.EXIT, reason=ExitReason.ERROR)
        raise


if __name__ == "__main__":
    main()
