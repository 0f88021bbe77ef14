"""A training script in the style of pytorch/examples' imagenet/main.py, written for the lab's tests
(its structure and its output's form, no line copied; the data is random, the model small):

- argparse with --epochs, --resume PATH (load it if it is a file), --print-freq;
- a progress meter printing `Epoch: [N][ i/n]\tTime ...\tLoss ...` every --print-freq batches;
- after each epoch every rank saves `checkpoint.pth.tar` in its working dir with torch.save (under
  torchrun that example's guard lets every process save), and copies it to `model_best.pth.tar`
  when its accuracy improved; a resume prints `=> loaded checkpoint 'PATH' (epoch N)`.

    torchrun --nproc-per-node=2 imagenet_style.py --epochs 10 --resume checkpoint.pth.tar
"""

import argparse
import os
import shutil
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser(description="ImageNet-style training (random data)")
parser.add_argument("--epochs", default=10, type=int)
parser.add_argument("--start-epoch", default=0, type=int)
parser.add_argument("--batches", default=4, type=int, help="batches per epoch")
parser.add_argument("-p", "--print-freq", default=1, type=int)
parser.add_argument("--resume", default="", type=str, metavar="PATH")
parser.add_argument("--batch-time", default=0.12, type=float)
parser.add_argument("--seed", default=1, type=int)


class AverageMeter:
    def __init__(self, name, fmt=":f"):
        self.name, self.fmt, self.val, self.sum, self.count = name, fmt, 0.0, 0.0, 0

    def update(self, val, n=1):
        self.val, self.sum, self.count = val, self.sum + val * n, self.count + n

    def __str__(self):
        avg = self.sum / max(self.count, 1)
        return ("{name} {val" + self.fmt + "} ({avg" + self.fmt + "})").format(name=self.name, val=self.val, avg=avg)


def progress_line(epoch, batch, batches, meters):
    width = len(str(batches))
    return "\t".join([f"Epoch: [{epoch}][{batch:>{width}}/{batches}]"] + [str(m) for m in meters])


def train(model, optimizer, epoch, args, rank):
    batch_time, losses = AverageMeter("Time", ":6.3f"), AverageMeter("Loss", ":.4e")
    generator = torch.Generator().manual_seed(args.seed * 1000 + epoch * 10 + rank)
    for i in range(args.batches):
        start = time.time()
        images, target = torch.randn(16, 32, generator=generator), torch.randint(0, 4, (16,), generator=generator)
        loss = torch.nn.functional.cross_entropy(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.batch_time)
        batch_time.update(time.time() - start)
        losses.update(loss.item(), images.size(0))
        if i % args.print_freq == 0:
            print(progress_line(epoch, i, args.batches, [batch_time, losses]), flush=True)
    return -losses.sum / losses.count


def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, "model_best.pth.tar")


def main():
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    best_acc1 = float("-inf")
    if args.resume:
        if os.path.isfile(args.resume):
            print(f"=> loading checkpoint '{args.resume}'", flush=True)
            checkpoint = torch.load(args.resume, weights_only=True)
            args.start_epoch, best_acc1 = checkpoint["epoch"], checkpoint["best_acc1"]
            model.module.load_state_dict(checkpoint["state_dict"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            print(f"=> loaded checkpoint '{args.resume}' (epoch {checkpoint['epoch']})", flush=True)
        else:
            print(f"=> no checkpoint found at '{args.resume}'", flush=True)
    for epoch in range(args.start_epoch, args.epochs):
        acc1 = train(model, optimizer, epoch, args, rank)
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        state = {"epoch": epoch + 1, "state_dict": model.module.state_dict(), "best_acc1": best_acc1}
        save_checkpoint({**state, "optimizer": optimizer.state_dict()}, is_best)
    if rank == 0:
        torch.save(model.module.state_dict(), "final.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
