"""A write that found its disk full: the words it shows up in, and a checkpoint the trainer could not write.

Python's own writes say the kernel's reason ("[Errno 28] No space left on device", a quota
"[Errno 122] Disk quota exceeded"). torch.save says it in its zip writer's words, with the
reason lost: "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598", or for a
small object "basic_ios::clear: iostream error" (both measured here on /dev/full, torch 2.13),
or "PytorchStreamWriter failed writing file data/0: file write failed" (users meet these on
full disks and asked for a plainer message, pytorch/pytorch#76108).
A short write has other causes (an I/O error, a file grown past its limit), so the card says
what the words mean and where to look, and does not claim more.

The lab's trainer survives a checkpoint it cannot write (it records `lab.checkpoint_failed`
and trains on from its last good checkpoint): the card then names that rank as a finding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from lab.health.events import Event, earliest

TORCH_WORDS = re.compile(
    r"PytorchStreamWriter failed writing|unexpected pos \d+ vs \d+|basic_ios::clear: iostream error"
)
FULL = re.compile(rf"No space left on device|Disk quota exceeded|\[Errno (?:28|122)\]|{TORCH_WORDS.pattern}")
TORCH_NOTE = (
    "torch.save says 'unexpected pos', 'file write failed' or 'iostream error' when a write comes up short, "
    "without the kernel's reason: a full disk or quota most often; check the free space where the rank saves"
)


def full(error: str) -> bool:
    """The error is a write refused for want of space (or torch's words for a short write)."""
    return bool(FULL.search(error))


def how(error: str) -> str:
    """The card's "how" for a rank that died of it."""
    return f"raised {error.split(':')[0]} writing a file: disk full"


def note(error: str) -> str:
    """What the card adds when torch's words hide the reason ("": the error says it)."""
    return TORCH_NOTE if TORCH_WORDS.search(error) else ""


@dataclass(frozen=True)
class FailedWrite:
    """A checkpoint a rank could not write, and went on without."""

    rank: int
    node: str
    step: int
    reason: str

    @property
    def disk_full(self) -> bool:
        return full(self.reason)

    def text(self) -> str:
        why = "its disk is full" if self.disk_full else "the write failed"
        return (
            f"checkpoint not written: rank {self.rank} on {self.node} could not save step {self.step} "
            f"({self.reason}): {why}; it trained on from its last checkpoint"
        )


def first_failed_write(ranks: Iterable[dict]) -> FailedWrite | None:
    """The earliest `lab.checkpoint_failed` record of any rank."""
    e = earliest(ranks, Event.CHECKPOINT_FAILED)
    if e is None:
        return None
    return FailedWrite(e["rank"], str(e.get("node", "")), int(e.get("step", 0)), str(e.get("reason", "")))
