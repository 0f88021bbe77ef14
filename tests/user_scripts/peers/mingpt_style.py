"""A training script in the style of pytorch/examples' distributed/minGPT-ddp, written for the lab's
tests (its structure and its output's form, no line copied; a tiny model on random tokens):

- a Hydra app: its settings are a dataclass in Hydra's ConfigStore, changed on the command line
  (`max_epochs=8 save_every=2`); Hydra writes its own log folder where the app starts;
- a Trainer that loads its snapshot through fsspec when one exists ("Resuming training from
  snapshot at Epoch N", the epoch it finished) and saves it straight to `snapshot_path` with
  torch.save, from local rank 0 of each node, every `save_every` epochs;
- progress as `[GPUr] Epoch N | Iter i | Train Loss x`.

    torchrun --nproc-per-node=2 mingpt_style.py max_epochs=8
"""

import os
import time
from dataclasses import dataclass

import fsspec
import hydra
import torch
import torch.distributed as dist
from hydra.core.config_store import ConfigStore
from torch.nn.parallel import DistributedDataParallel


@dataclass
class TrainerConfig:
    max_epochs: int = 8
    save_every: int = 1
    batches: int = 4
    batch_time: float = 0.1
    snapshot_path: str = "snapshot.pt"
    vocab: int = 32
    seed: int = 3


ConfigStore.instance().store(name="train", node=TrainerConfig)


class Trainer:
    def __init__(self, config: TrainerConfig):
        self.config = config
        self.local_rank, self.global_rank = int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"])
        torch.manual_seed(config.seed)
        self.model = torch.nn.Sequential(torch.nn.Embedding(config.vocab, 16), torch.nn.Linear(16, config.vocab))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-3)
        self.epochs_run = 0
        if os.path.exists(config.snapshot_path):
            self._load_snapshot()
        self.model = DistributedDataParallel(self.model)

    def _load_snapshot(self):
        with fsspec.open(self.config.snapshot_path, "rb") as f:
            snapshot = torch.load(f, map_location="cpu", weights_only=True)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        self.epochs_run = snapshot["FINISHED_EPOCH"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}", flush=True)

    def _save_snapshot(self, epoch: int):
        model = self.model.module
        snapshot = {
            "MODEL_STATE": model.state_dict(),
            "OPTIMIZER_STATE": self.optimizer.state_dict(),
            "FINISHED_EPOCH": epoch,
        }
        torch.save(snapshot, self.config.snapshot_path)
        print(f"Snapshot saved at epoch {epoch}", flush=True)

    def _run_epoch(self, epoch: int):
        generator = torch.Generator().manual_seed(self.config.seed * 100 + epoch * 8 + self.global_rank)
        for it in range(self.config.batches):
            tokens = torch.randint(0, self.config.vocab, (8, 12), generator=generator)
            logits = self.model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, self.config.vocab), tokens[:, 1:].reshape(-1))
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            time.sleep(self.config.batch_time)
            print(f"[GPU{self.global_rank}] Epoch {epoch} | Iter {it} | Train Loss {loss.item():.5f}", flush=True)

    def train(self):
        for epoch in range(self.epochs_run, self.config.max_epochs):
            epoch += 1
            self._run_epoch(epoch)
            if self.local_rank == 0 and epoch % self.config.save_every == 0:
                self._save_snapshot(epoch)


@hydra.main(version_base=None, config_name="train")
def main(cfg: TrainerConfig):
    dist.init_process_group("gloo")
    trainer = Trainer(cfg)
    trainer.train()
    if trainer.global_rank == 0:
        torch.save(trainer.model.module.state_dict(), "final.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
