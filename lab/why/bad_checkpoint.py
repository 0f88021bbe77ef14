"""A checkpoint that could not be read back: torch's words for a damaged file, and one the trainer set aside.

torch.load says a damaged file in its readers' words, not "corrupt" (measured here, torch 2.13):
a truncated file "PytorchStreamReader failed reading zip archive: failed finding central
directory", an empty one a bare EOFError, overwritten bytes an UnpicklingError ("Weights only
load failed", "invalid load key"). A run meets them on resume after a crash mid-save; the card
says what the words mean.

The lab's trainer checks a digest before it unpickles (lab/workloads/checkpoint.py): a damaged
file is recorded as `lab.checkpoint_invalid`, set aside, and the one before it loaded. The job
goes on; the card names the file as a finding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from lab.health.events import Event, earliest

DAMAGED = re.compile(
    r"PytorchStreamReader failed reading|failed finding central directory|UnpicklingError|invalid load key"
    r"|^EOFError:?( Ran out of input)?$|checksum mismatch: truncated or corrupted"
)
STEP_IN_NAME = re.compile(r"step_(\d+)\.ckpt")


def damaged(error: str) -> bool:
    """The error is a file read back that is not what was written (truncated, overwritten, empty)."""
    return bool(DAMAGED.search(error.strip()))


def how(error: str) -> str:
    """The card's "how" for a rank that died of it."""
    return f"raised {error.split(':')[0]} reading a file: a damaged checkpoint"


def note(ranks: list[int]) -> str:
    """What the card adds when several ranks died reading a damaged file."""
    return (
        f"ranks {', '.join(map(str, ranks))} each raised reading a damaged checkpoint: the file is the cause, "
        "not the rank that raised first (the earliest noticed is shown); find the file the traceback loads, and "
        "resume from the one before it"
    )


@dataclass(frozen=True)
class SetAside:
    """A checkpoint a rank found damaged on resume, set aside, and resumed without."""

    rank: int
    node: str
    step: int | None  # the step the file was saved at, from its name
    path: str
    reason: str

    def text(self) -> str:
        return (
            f"damaged checkpoint: rank {self.rank} on {self.node} could not use {self.path} ({self.reason}); "
            "set aside, it resumed from the one before"
        )


def first_set_aside(ranks: Iterable[dict]) -> SetAside | None:
    """The earliest `lab.checkpoint_invalid` record of any rank."""
    e = earliest(ranks, Event.CHECKPOINT_INVALID)
    if e is None:
        return None
    path = str(e.get("path", ""))
    step = STEP_IN_NAME.search(path)
    return SetAside(e["rank"], str(e.get("node", "")), int(step[1]) if step else None, path, str(e.get("reason", "")))
