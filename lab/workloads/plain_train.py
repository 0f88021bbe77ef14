"""An ordinary DDP training script with no lab import: what `lab bench diagnosis` breaks as a
user's script (the lab watches it through lab.node.user_script, unchanged).

    torchrun --nproc-per-node=2 lab/workloads/plain_train.py --steps 50 --step-time 0.05

Every rank prints `step N loss X` after each step, the line a drill reads its progress from.
With --save-every N each rank saves its model every N steps to rank<R>.pt in its working
dir, as a script that keeps per-rank state on each node's own disk does. With
--snapshot-every N rank 0 saves a snapshot (model, optimizer, step) every N steps to
snapshot.pt, and every rank resumes from it at start: the tutorial's pattern. Each step's
batch comes from the rank and the step alone, so a resumed run trains on the same data, and
with --result FILE rank 0 writes the final weights at the end, for `--compare FILE`.
--timeout-s is the process-group timeout: torch's default (30 minutes on gloo) would let a
hung peer hold the others for that long.
"""

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

SNAPSHOT = "snapshot.pt"  # in the working dir


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--step-time", type=float, default=0.0, help="pace each step to at least this many seconds")
    p.add_argument("--timeout-s", type=float, default=1800.0, help="the process group's timeout")
    p.add_argument("--save-every", type=int, default=0, help="each rank saves its model every N steps (0: never)")
    p.add_argument("--snapshot-every", type=int, default=0, help="rank 0 snapshots every N steps (0: never)")
    p.add_argument("--result", default="", help="at the end rank 0 writes the weights here, one number a line")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0
    if args.snapshot_every and os.path.exists(SNAPSHOT):
        snapshot = torch.load(SNAPSHOT, weights_only=True)
        model.module.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        done = snapshot["step"]
        print(f"rank {rank} resumed from its snapshot ({done} steps done)", flush=True)
    for step in range(done + 1, args.steps + 1):
        started = time.monotonic()
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank * 1_000_003 + step))
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if args.save_every and step % args.save_every == 0:
            torch.save(model.module.state_dict(), f"rank{rank}.pt")
        if args.snapshot_every and step % args.snapshot_every == 0 and rank == 0:
            state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            torch.save(state, f"{SNAPSHOT}.tmp")
            os.replace(f"{SNAPSHOT}.tmp", SNAPSHOT)
        time.sleep(max(0.0, args.step_time - (time.monotonic() - started)))
    print(f"rank {rank} done on {os.uname().nodename}", flush=True)
    if args.result and rank == 0:  # exact: a float's repr reads back as the same bits
        with open(args.result, "w") as out:
            out.writelines(f"{v!r}\n" for w in model.module.parameters() for v in w.detach().flatten().tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
