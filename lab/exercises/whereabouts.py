"""Where each rank runs now and how far it has got, from the ranks' event logs read as they grow
(lab.health.tail). A drill asks both many times a second while it waits for a step, and a chaos
campaign asks where a rank runs before and after every fault of an hour-long job: reading every
log whole each time cost a campaign's recoveries seconds of CPU at its end, with 88,000 steps on
record. The answers are read_events' (the newest start of a rank by time, its highest step, from
the well-formed records), kept up to date instead of worked out again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import LabError
from lab.health.events import Event, rank_record
from lab.health.tail import Tail


@dataclass
class Whereabouts:
    events_dir: Path
    starts: dict[int, dict] = field(default_factory=dict)  # rank -> its newest start record
    highest: dict[int, int] = field(default_factory=dict)  # rank -> its highest step
    tail: Tail = field(init=False)

    def __post_init__(self) -> None:
        self.tail = Tail(self.events_dir)

    def look(self) -> Whereabouts:
        """Take all the ranks wrote since the last look (not a chunk of it: a rank's newest start
        may lie past one)."""
        for record in self.tail.records(whole=True):
            if not rank_record(record):
                continue
            rank = record["rank"]
            if record["event"] == Event.STEP:
                self.highest[rank] = max(self.highest.get(rank, 0), record["step"])
            elif record["event"] == Event.START and record["time"] >= self.starts.get(rank, {}).get("time", 0):
                self.starts[rank] = record
        return self

    def last_step(self, rank: int) -> int:
        return self.look().highest.get(rank, 0)

    def locate(self, rank: int) -> tuple[str, int]:
        """(node name, local rank) where a global rank runs now."""
        start = self.look().starts.get(rank)
        if start is None:
            raise LabError(f"rank {rank} has not started")
        return start["node"], start["local_rank"]
