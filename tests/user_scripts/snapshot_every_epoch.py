"""The common tutorial pattern: a snapshot every epoch, loaded at start if it exists.

    torchrun --nproc-per-node=2 snapshot_every_epoch.py --epochs 8

Rank 0 saves snapshot.pt (relative: the working dir) after each epoch; every rank loads it
at start. At the end rank 0 writes result.pt, the final weights. Written for the lab's
tests as a user would write it: it knows nothing of the lab.

The kinds of script people write, one flag each (the drills' verdicts must hold for all):
    --log-ranks 0         only rank 0 prints its progress
    --save-every N        a snapshot before the first epoch and every N epochs (sparse)
    --config FILE         reads a file relative to the folder it starts in
    --crash-once-at E     rank 0 raises at epoch E, once (a marker file says it did)
and an argparse error is `--epochs eight`.
"""

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--epoch-time", type=float, default=0.5)
parser.add_argument("--snapshot", default="snapshot.pt")
parser.add_argument("--log-ranks", choices=("all", "0"), default="all")
parser.add_argument("--save-every", type=int, default=1)
parser.add_argument("--config")
parser.add_argument("--crash-once-at", type=int)
args = parser.parse_args()
if args.config:
    with open(args.config) as f:  # relative to where it was started, as its author runs it
        settings = f.read()

dist.init_process_group("gloo", timeout=timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
first_epoch = 0
if os.path.exists(args.snapshot):
    snapshot = torch.load(args.snapshot, weights_only=True)
    model.module.load_state_dict(snapshot["model"])
    first_epoch = snapshot["epoch"] + 1
    print(f"[RANK{rank}] Resuming training from snapshot at Epoch {first_epoch}", flush=True)


def snapshot(last_done: int) -> None:
    torch.save({"model": model.module.state_dict(), "epoch": last_done}, args.snapshot + ".tmp")
    os.replace(args.snapshot + ".tmp", args.snapshot)


for epoch in range(first_epoch, args.epochs):
    if rank == 0 and args.save_every > 1 and epoch % args.save_every == 0:
        snapshot(epoch - 1)  # the state before this epoch: a resume starts it again
    if rank == 0 and epoch == args.crash_once_at and not os.path.exists("crashed-once"):
        open("crashed-once", "w").close()
        raise RuntimeError(f"a bug at epoch {epoch}, on the first try only")
    generator = torch.Generator().manual_seed(1000 * epoch + rank)
    for _ in range(4):
        x = torch.randn(16, 8, generator=generator)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.epoch_time / 4)
    if args.log_ranks == "all" or rank == 0:
        print(f"[RANK{rank}] Epoch {epoch} | Batchsize: 16 | Steps: 4 | loss {loss.item():.4f}", flush=True)
    if rank == 0 and args.save_every == 1:
        snapshot(epoch)

if rank == 0:
    torch.save(model.module.state_dict(), "result.pt")
dist.destroy_process_group()
