"""The ranks' progress as a long job writes it: the step events, read incrementally
(lab.health.tail: a campaign polls many times a second for an hour), only steps, starts and
checkpoint saves kept. The questions asked during a recovery look only at the steps since a mark
taken before the fault: the whole list grows with the run, and a recovery needs the cores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lab.health.events import Event
from lab.health.tail import Tail


@dataclass
class Progress:
    events_dir: Path
    steps: list[tuple[float, int, int]] = field(default_factory=list)  # (time, rank, step)
    saves: list[tuple[float, int, float]] = field(default_factory=list)  # (time, step, seconds)
    starts: list[tuple[float, int]] = field(default_factory=list)  # (time, rank): a rank's process began
    losses: dict[tuple[int, int], list[tuple[float, str]]] = field(default_factory=dict)  # (rank, step): (time, hex)
    highest: int = 0
    tail: Tail = field(init=False)

    def __post_init__(self) -> None:
        self.tail = Tail(self.events_dir)

    def poll(self, whole: bool = False) -> None:
        """Take what the ranks wrote since the last poll (whole: all of it, the ledger's final read)."""
        for record in self.tail.records(whole):
            self._take(record)

    def polled(self, whole: bool = False) -> Progress:
        self.poll(whole)
        return self

    def _take(self, record: dict) -> None:
        if not isinstance(record.get("rank"), int):
            return  # a foreign line
        if record.get("event") == Event.STEP and isinstance(record.get("step"), int):
            self.steps.append((float(record["time"]), int(record["rank"]), record["step"]))
            self.highest = max(self.highest, record["step"])
            if isinstance(record.get("loss"), float):
                key = (int(record["rank"]), record["step"])
                self.losses.setdefault(key, []).append((float(record["time"]), record["loss"].hex()))
        elif record.get("event") == Event.START:
            self.starts.append((float(record["time"]), record["rank"]))
        elif record.get("event") == Event.CHECKPOINT_SAVED and record.get("rank") == 0:
            self.saves.append((float(record["time"]), int(record.get("step", 0)), float(record.get("seconds", 0.0))))

    def front(self) -> int:
        """The highest step any rank has done."""
        return self.highest

    def mark(self) -> int:
        """Where the steps read so far end: a step recorded after this moment is read after it."""
        return len(self.steps)

    def last_by_rank(self, since: float = 0.0, mark: int = 0) -> dict[int, int]:
        """Each rank's highest step recorded after `since` (among the steps read after `mark`)."""
        found: dict[int, int] = {}
        for when, rank, step in self.steps[mark:]:
            if when > since:
                found[rank] = max(found.get(rank, 0), step)
        return found

    def all_reached(self, world: int, step: int, since: float, mark: int = 0) -> float | None:
        """When every rank had recorded `step` (or beyond) after `since` (among the steps read
        after `mark`); None while some has not."""
        first: dict[int, float] = {}
        for when, rank, done in self.steps[mark:]:
            if when > since and done >= step and rank < world:
                first[rank] = min(first.get(rank, when), when)
        return max(first.values()) if len(first) == world else None

    def started_since(self, moment: float) -> set[int]:
        """The ranks whose process began after that moment: a replacement, a restart, a rerun."""
        return {rank for when, rank in self.starts if when > moment}

    def steps_redone(self) -> int:
        """Steps done more than once, summed over ranks: work a recovery made the job do again."""
        seen: dict[tuple[int, int], int] = {}
        for _, rank, step in self.steps:
            seen[(rank, step)] = seen.get((rank, step), 0) + 1
        return sum(n - 1 for n in seen.values())
