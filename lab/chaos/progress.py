"""The ranks' progress as a long job writes it: the step events, read incrementally.

A campaign polls the events many times a second for an hour; rereading every file each time
would cost more than the job. So each rank*.jsonl is read from where the last poll stopped
(through lab.files: the node writes those files), and only steps and checkpoint saves are kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from lab import files
from lab.health.events import Event

CHUNK = 4 << 20


@dataclass
class Progress:
    events_dir: Path
    offsets: dict[str, int] = field(default_factory=dict)
    partial: dict[str, bytes] = field(default_factory=dict)
    steps: list[tuple[float, int, int]] = field(default_factory=list)  # (time, rank, step)
    saves: list[tuple[float, int, float]] = field(default_factory=list)  # (time, step, seconds)
    starts: list[tuple[float, int]] = field(default_factory=list)  # (time, rank): a rank's process began
    losses: dict[tuple[int, int], list[tuple[float, str]]] = field(default_factory=dict)  # (rank, step): (time, hex)

    def poll(self, whole: bool = False) -> None:
        """Read what the ranks wrote since the last poll: at most CHUNK of each file, so a poll
        in the campaign's loop stays short; whole: all of it (the ledger's final read)."""
        for path in sorted(self.events_dir.glob("rank*.jsonl")) if self.events_dir.is_dir() else []:
            while (read := files.read_from(path, self.offsets.get(path.name, 0), CHUNK)) is not None:
                chunk, _size = read
                self.offsets[path.name] = self.offsets.get(path.name, 0) + len(chunk)
                *lines, rest = (self.partial.get(path.name, b"") + chunk).split(b"\n")
                self.partial[path.name] = rest
                for line in lines:
                    self._take(line)
                if not whole or len(chunk) < CHUNK:
                    break

    def polled(self, whole: bool = False) -> Progress:
        self.poll(whole)
        return self

    def _take(self, line: bytes) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            return
        if not isinstance(record, dict):
            return
        if record.get("event") == Event.STEP and isinstance(record.get("step"), int):
            self.steps.append((float(record["time"]), int(record["rank"]), record["step"]))
            if isinstance(record.get("loss"), float):
                key = (int(record["rank"]), record["step"])
                self.losses.setdefault(key, []).append((float(record["time"]), record["loss"].hex()))
        elif record.get("event") == Event.START and isinstance(record.get("rank"), int):
            self.starts.append((float(record["time"]), record["rank"]))
        elif record.get("event") == Event.CHECKPOINT_SAVED and record.get("rank") == 0:
            self.saves.append((float(record["time"]), int(record.get("step", 0)), float(record.get("seconds", 0.0))))

    def front(self) -> int:
        """The highest step any rank has done."""
        return max((s for _, _, s in self.steps), default=0)

    def last_by_rank(self, since: float = 0.0) -> dict[int, int]:
        """Each rank's highest step recorded after `since`."""
        found: dict[int, int] = {}
        for when, rank, step in self.steps:
            if when > since:
                found[rank] = max(found.get(rank, 0), step)
        return found

    def all_reached(self, world: int, step: int, since: float) -> float | None:
        """When every rank had recorded `step` (or beyond) after `since`; None while some has not."""
        first: dict[int, float] = {}
        for when, rank, done in self.steps:
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
