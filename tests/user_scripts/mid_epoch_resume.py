"""A step-checkpointing script that resumes mid-epoch, and tells the lab which samples it used.

    torchrun --nproc-per-node=2 mid_epoch_resume.py --steps 60 [--resume-sampler replay]

A DistributedSampler deals each epoch; rank 0 saves the model, the optimizer and the global step
every --save-every steps (ckpt.pt in the working dir), and every rank loads it at start. On
resume the step says where in the epoch the job was:

    --resume-sampler skip    skips the epoch's batches already trained on (right)
    --resume-sampler replay  starts the epoch again from its first batch, as a script that
                             restores the epoch but forgets the position within it does: those
                             batches are trained on twice

Each step calls lab.progress.step with its sample indices, so the drills count what was
skipped or repeated (lab.exercises.samples).
"""

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler, TensorDataset

from lab.progress import step as report_step

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--save-every", type=int, default=5)
parser.add_argument("--step-time", type=float, default=0.1)
parser.add_argument("--resume-sampler", choices=("skip", "replay"), default="skip")
args = parser.parse_args()

dist.init_process_group("gloo", timeout=timedelta(seconds=10))
rank = dist.get_rank()
generator = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(256, 8, generator=generator), torch.randn(256, 1, generator=generator))
sampler = DistributedSampler(data, shuffle=True, seed=0, drop_last=True)
per_epoch = len(sampler) // 4
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
step = 0
if os.path.exists("ckpt.pt"):
    saved = torch.load("ckpt.pt", weights_only=True)
    model.module.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    step = saved["step"]
    print(f"rank {rank} resumed at step {step}", flush=True)

epoch, done = divmod(step, per_epoch)
start = done if args.resume_sampler == "skip" else 0
while step < args.steps:
    sampler.set_epoch(epoch)
    order = list(sampler)
    for batch in range(start, per_epoch):
        if step >= args.steps:
            break
        indices = order[batch * 4 : (batch + 1) * 4]
        x, y = data[indices]
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        report_step(step, samples=indices, epoch=epoch)
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(args.step_time)
        if rank == 0 and step % args.save_every == 0:
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, "t.pt")
            os.replace("t.pt", "ckpt.pt")
    epoch, start = epoch + 1, 0
dist.destroy_process_group()
