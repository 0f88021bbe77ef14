"""Exactly-once data: which samples the job's final weights were trained on, epoch by epoch.

A rank that records the sample indices of each step (the trainer does; a script through
`lab.progress.step(n, samples=..., epoch=...)`) leaves a history that restarts rewrite: a
restart resumes from a checkpoint (`checkpoint_loaded`, step C) and a replacement takes a
peer's state (`state_from_peer`, step S), so every step a rank recorded past that point was
lost with its process, and the steps done again replace it. What is left, per rank, is the
lineage of the final weights. Over it, for each epoch:

- repeated: samples consumed more than once in the epoch (always wrong: a resume that replayed
  batches, a resized job that mapped its position wrongly);
- skipped: samples the epoch should have consumed and never did, judged once the epoch is over
  (a later epoch began): the count an uninterrupted epoch consumes at the world size the epoch
  ended at (`epoch_samples`, which the trainer declares when it starts, with its world size)
  less the distinct samples consumed. An epoch resized on the way ends where fewer samples are
  left than one step takes at its last world size (drop_last: no step can take them), which an
  uninterrupted epoch's count does not foresee: up to one step's samples less one are its tail,
  not skips (the 4 -> 3 -> 4 ranks drill left 24 of a 32-sample step there).

A rank moved forward by a peer's state over steps it never recorded consumed them through that
peer (their gradients are in the state); the epoch's skips are then not judged, and it says so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lab.health.events import Event


@dataclass
class Epoch:
    epoch: int
    consumed: int = 0
    distinct: int = 0
    expected: int | None = None  # the samples an uninterrupted epoch consumes (None: not declared)
    tail: int = 0  # a resized epoch: samples short of `expected` that no step at its last world size could take
    complete: bool = False  # a later epoch began: its skips can be judged
    adopted: bool = False  # some rank took steps of it from a peer's state, unrecorded
    first_repeat: dict[str, int] | None = None  # the first repeated sample: rank, step, sample

    @property
    def repeated(self) -> int:
        return self.consumed - self.distinct

    @property
    def skipped(self) -> int | None:
        if not self.complete or self.expected is None or self.adopted:
            return None
        return max(0, self.expected - self.tail - self.distinct)


@dataclass
class _Lineage:
    """One rank's steps still in the final weights' past: step -> (epoch, samples)."""

    steps: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    adopted_epochs: set[int] = field(default_factory=set)

    def rewind(self, to: int) -> None:
        for step in [s for s in self.steps if s > to]:
            del self.steps[step]


def lineages(events: list[dict]) -> dict[int, _Lineage]:
    """Each rank's recorded steps that the final weights descend from. A group that resumes from
    step C takes the whole job back to C: every rank's steps past C are gone, also those of a
    rank the resumed group no longer has (an elastic job that shrank keeps, at first, no rank 2;
    when it grows back, the rank 2 it starts trained nothing the job still holds past C)."""
    ranks: dict[int, _Lineage] = {}
    for e in sorted(events, key=lambda e: e.get("time", 0.0)):
        kind, rank = e.get("event"), e.get("rank")
        if not isinstance(rank, int):
            continue
        line = ranks.setdefault(rank, _Lineage())
        if kind in (Event.CHECKPOINT_LOADED, Event.STATE_FROM_PEER) and isinstance(e.get("step"), int):
            for each in ranks.values():
                each.rewind(e["step"])
            held = max(line.steps, default=0)
            if kind == Event.STATE_FROM_PEER and e["step"] > held and line.steps:
                last_epoch = line.steps[held][0]
                line.adopted_epochs.update({last_epoch, last_epoch + 1})
        elif kind == Event.STEP and isinstance(e.get("samples"), list) and isinstance(e.get("epoch"), int):
            line.rewind(e["step"] - 1)
            line.steps[e["step"]] = (e["epoch"], [int(x) for x in e["samples"]])
    return {rank: line for rank, line in ranks.items() if line.steps}


def ledger(events: list[dict]) -> list[Epoch]:
    """Per epoch of the final weights' history: consumed, distinct, repeated and skipped."""
    starts = [e for e in events if e.get("event") == Event.START and e.get("epoch_samples")]
    by_world = {e.get("world_size"): e["epoch_samples"] for e in starts}
    fallback = min(by_world.values(), default=None)
    epochs: dict[int, Epoch] = {}
    seen: dict[int, Counter] = {}
    steps: dict[int, dict[int, list[int]]] = {}  # epoch -> step -> each rank's sample count
    lines = lineages(events)
    # Events read from their tail (a very long run's): the first epoch in view began out of sight.
    cut = min((min(line.steps) for line in lines.values()), default=1) > 1
    # In the job's step order, every rank's step at once: the second time a sample is consumed is
    # the repeat (by rank first, a resized job's early step on a high rank read as the repeat).
    taken = sorted(
        (step, rank, epoch, samples) for rank, line in lines.items() for step, (epoch, samples) in line.steps.items()
    )
    for step, rank, epoch, samples in taken:
        record = epochs.setdefault(epoch, Epoch(epoch))  # its expected count: once its last step is known
        steps.setdefault(epoch, {}).setdefault(step, []).append(len(samples))
        counts = seen.setdefault(epoch, Counter())
        for sample in samples:
            counts[sample] += 1
            if counts[sample] == 2 and record.first_repeat is None:
                record.first_repeat = {"rank": rank, "step": step, "sample": sample}
        record.consumed += len(samples)
    for line in lines.values():
        for epoch in line.adopted_epochs & set(epochs):
            epochs[epoch].adopted = True
    last, first = max(epochs, default=-1), min(epochs, default=-1)
    for epoch, record in epochs.items():
        record.distinct = len(seen[epoch])
        record.complete = epoch < last and not (cut and epoch == first)
        ended_at = steps[epoch][max(steps[epoch])]  # the epoch's last step: its ranks' sample counts
        record.expected = by_world.get(len(ended_at), fallback)
        if len({sum(counts) for counts in steps[epoch].values()}) > 1:  # resized within the epoch
            record.tail = sum(ended_at) - 1
    return [epochs[e] for e in sorted(epochs)]


def summary(events: list[dict]) -> dict[str, Any] | None:
    """The ledger in a report's words (None: no rank recorded its samples)."""
    epochs = ledger(events)
    if not epochs:
        return None
    repeated = sum(e.repeated for e in epochs)
    skipped = sum(e.skipped or 0 for e in epochs)
    judged = [e.epoch for e in epochs if e.skipped is not None]
    worst = next((e for e in epochs if e.repeated or e.skipped), None)
    where = ""
    if worst is not None and worst.first_repeat:
        first = worst.first_repeat
        where = f"; first repeat: sample {first['sample']} again at rank {first['rank']}'s step {first['step']}"
    elif worst is not None:
        tail = f" (resized: up to {worst.tail} at its end no step could take)" if worst.tail else ""
        where = f"; epoch {worst.epoch} consumed {worst.distinct} of {worst.expected}{tail}"
    return {
        "epochs": len(epochs),
        "epochs_judged_for_skips": judged,
        "repeated": repeated,
        "skipped": skipped,
        "why": f"{repeated} repeated, {skipped} skipped over {len(epochs)} epoch(s){where}",
    }


CHECK = "every sample once per epoch"


def check(report, events: list[dict]) -> bool | None:
    """The report's check that every sample was consumed once per epoch (None: nothing recorded)."""
    found = summary(events)
    if found is None:
        return None
    report.facts["samples"] = found
    return report.check(CHECK, not found["repeated"] and not found["skipped"], found["why"])
