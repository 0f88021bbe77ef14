"""Where the trainer is in its data: an epoch, and how far into that epoch's shuffled order every
rank together has got. Kept in the checkpoint and handed over with a peer's state, so a job that
resumes, on the same number of ranks or another, goes on from the next unconsumed sample.

A `DistributedSampler(shuffle=True, drop_last=True)` gives rank r of W the positions r, r+W,
r+2W, ... of the epoch's permutation; its batch b of size B is then the contiguous block
[W*B*b, W*B*(b+1)) of that permutation, dealt round-robin. So the trainer's data is the
permutation consumed block by block, and its place is the offset of the next block: the same
batches, bit for bit, as the sampler's at one world size, and on another the rest of the epoch
dealt to the ranks there are (where a place derived from the step, as before, replayed or
skipped samples once the world size changed: `lab.exercises.samples` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Position:
    epoch: int = 0
    offset: int = 0  # samples of the epoch's order consumed, by every rank together

    def to_json(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}

    @classmethod
    def from_checkpoint(cls, sampler: dict, world_size: int, batch_size: int) -> Position:
        """From a checkpoint's "sampler" record (one saved before offsets: epoch and next batch)."""
        if "offset" in sampler:
            return cls(int(sampler["epoch"]), int(sampler["offset"]))
        return cls(int(sampler["epoch"]), int(sampler["batch"]) * world_size * batch_size)


class Data:
    """One rank's batches, epoch after epoch, from a position."""

    def __init__(self, samples: int, seed: int, world: int, rank: int, batch: int):
        self.samples, self.seed, self.world, self.rank, self.batch = samples, seed, world, rank, batch
        self.limit = samples // world * world  # drop_last: every rank the same count
        self._order: tuple[int, list[int]] | None = None

    def take(self, at: Position) -> tuple[Position, list[int]]:
        """The position the step starts at (the next epoch's start when too few samples are left
        for a whole step on this many ranks) and this rank's indices for it."""
        block = self.world * self.batch
        if at.offset + block > self.limit:
            at = Position(at.epoch + 1, 0)
        order = self.order(at.epoch)
        return at, order[at.offset : at.offset + block][self.rank :: self.world]

    def after(self, at: Position) -> Position:
        """The position once the step that started at `at` is done."""
        return Position(at.epoch, at.offset + self.world * self.batch)

    def order(self, epoch: int) -> list[int]:
        """The epoch's permutation, as DistributedSampler draws it (seed + epoch)."""
        if self._order is None or self._order[0] != epoch:
            generator = torch.Generator()
            generator.manual_seed(self.seed + epoch)
            self._order = (epoch, torch.randperm(self.samples, generator=generator).tolist())
        return self._order[1]
