"""Where a campaign's weights left the uninterrupted run's: the first step whose loss differs.

A rank's loss at step s is computed from the weights after step s-1, on a batch that s alone
decides (the sampler's seed and epoch). So the first (rank, step) whose loss differs from the
reference run's names the update that went wrong (step s-1's, or the state a recovery handed
over before step s), and the fault that struck just before it is the suspect. A step done twice
with two different losses shows the same without a reference: the recovery before its second
run resumed from a state other than the one the first run had.
"""

from __future__ import annotations

from typing import Any

from lab.chaos.progress import Progress


def first_difference(job: Progress, reference: Progress, blows: list[Any]) -> dict[str, Any] | None:
    """The earliest step at which some rank's loss differs from the reference's at that step
    (None: every step both ran agrees), with the fault that struck last before it."""
    for (rank, step), runs in sorted(job.losses.items(), key=lambda item: (item[0][1], item[0][0])):
        expected = reference.losses.get((rank, step))
        if not expected:
            continue
        wanted = expected[0][1]
        for when, loss in runs:
            if loss != wanted:
                return _found(rank, step, when, loss, wanted, blows, "the uninterrupted run's")
    return None


def compared(job: Progress, reference: Progress) -> int:
    """How many (rank, step) losses the two runs share: what first_difference's None stands on."""
    return len(job.losses.keys() & reference.losses.keys())


def redone_differently(job: Progress, blows: list[Any]) -> dict[str, Any] | None:
    """The earliest step a rank ran twice with two different losses (None: no such step)."""
    for (rank, step), runs in sorted(job.losses.items(), key=lambda item: (item[0][1], item[0][0])):
        first = runs[0][1]
        for when, loss in runs[1:]:
            if loss != first:
                return _found(rank, step, when, loss, first, blows, "its first run's")
    return None


def _found(rank: int, step: int, when: float, loss: str, wanted: str, blows: list[Any], whose: str) -> dict[str, Any]:
    before = [(i, b) for i, b in enumerate(blows, 1) if b.time is not None and b.time <= when]
    suspect = before[-1] if before else None
    where = f"rank {rank}'s loss at step {step} is {float.fromhex(loss)!r}, {whose} {float.fromhex(wanted)!r}"
    if suspect:
        i, blow = suspect
        where += f"; the last fault before it: #{i} {blow.kind} on rank(s) {blow.ranks} at step {blow.front}"
    return {
        "rank": rank,
        "step": step,
        "loss": loss,
        "expected": wanted,
        "fault": suspect[0] if suspect else None,
        "why": where,
    }
