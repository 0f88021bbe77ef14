"""A training script in the style of pytorch/elastic's examples/imagenet/main.py, written for the
lab's tests (its structure and its output's form, no line copied; random data, a small model):

- a State (epoch, best accuracy, model, optimizer) snapshotted to --checkpoint-file by rank 0,
  through a temporary file and a rename ("=> saved checkpoint for epoch N at PATH");
- at start every rank loads the file if it has one, then the rank with the newest epoch
  broadcasts its state to the others (an elastic job's ranks may not share a disk);
- progress from every rank as `Epoch: [N][i/n]`, and a long default --checkpoint-file under /tmp
  (pass a relative one, as the lab's advice says, for drills).

    torchrun --nproc-per-node=2 elastic_imagenet_style.py --epochs 8 --checkpoint-file ckpt/checkpoint.pth.tar
"""

import argparse
import io
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser(description="elastic ImageNet-style training (random data)")
parser.add_argument("--epochs", default=8, type=int)
parser.add_argument("--batches", default=4, type=int)
parser.add_argument("--batch-time", default=0.12, type=float)
parser.add_argument("--checkpoint-file", default="/tmp/checkpoint.pth.tar", type=str)


class State:
    def __init__(self, model, optimizer):
        self.epoch, self.best_acc1, self.model, self.optimizer = -1, 0.0, model, optimizer

    def capture_snapshot(self):
        return {
            "epoch": self.epoch,
            "best_acc1": self.best_acc1,
            "state_dict": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def apply_snapshot(self, obj):
        self.epoch, self.best_acc1 = obj["epoch"], obj["best_acc1"]
        self.model.load_state_dict(obj["state_dict"])
        self.optimizer.load_state_dict(obj["optimizer"])

    def save(self, f):
        torch.save(self.capture_snapshot(), f)

    def load(self, f):
        self.apply_snapshot(torch.load(f, weights_only=True))


def load_checkpoint(checkpoint_file, model, optimizer):
    state = State(model, optimizer)
    if os.path.isfile(checkpoint_file):
        print(f"=> loading checkpoint file: {checkpoint_file}", flush=True)
        state.load(checkpoint_file)
        print(f"=> loaded checkpoint file: {checkpoint_file}", flush=True)
    newest = torch.tensor([state.epoch, dist.get_rank()])
    epochs = [torch.zeros(2, dtype=newest.dtype) for _ in range(dist.get_world_size())]
    dist.all_gather(epochs, newest)
    source = max(epochs, key=lambda t: (int(t[0]), -int(t[1])))
    if int(source[0]) >= 0:  # the rank holding the newest state sends it to the others
        buffer = io.BytesIO()
        if dist.get_rank() == int(source[1]):
            state.save(buffer)
        payload = [buffer.getvalue()]
        dist.broadcast_object_list(payload, src=int(source[1]))
        state.apply_snapshot(torch.load(io.BytesIO(payload[0]), weights_only=True))
    return state


def save_checkpoint(state, filename):
    os.makedirs(os.path.dirname(filename) or ".", exist_ok=True)
    tmp_filename = filename + ".tmp"
    torch.save(state.capture_snapshot(), tmp_filename)
    os.rename(tmp_filename, filename)
    print(f"=> saved checkpoint for epoch {state.epoch} at {filename}", flush=True)


def train(model, optimizer, epoch, args, rank):
    generator = torch.Generator().manual_seed(epoch * 31 + rank)
    total = 0.0
    for i in range(args.batches):
        x, y = torch.randn(16, 32, generator=generator), torch.randint(0, 4, (16,), generator=generator)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.batch_time)
        total += loss.item()
        print(f"Epoch: [{epoch}][{i}/{args.batches}]\tLoss {loss.item():.4e}", flush=True)
    return -total / args.batches


def main():
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = load_checkpoint(args.checkpoint_file, model.module, optimizer)
    for epoch in range(state.epoch + 1, args.epochs):
        state.epoch = epoch
        acc1 = train(model, optimizer, epoch, args, rank)
        state.best_acc1 = max(acc1, state.best_acc1)
        if rank == 0:
            save_checkpoint(state, args.checkpoint_file)
    if rank == 0:
        torch.save(model.module.state_dict(), "final.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
