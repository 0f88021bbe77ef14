"""The ranks' event logs read as they grow: each look reads only what was appended since the last.

Whoever watches a running job (a drill waiting for a step, a chaos campaign polling for the
ranks' return, a fault aimed at the node where a rank runs now) asks many times a second, for
as long as the job runs. Reading every rank*.jsonl whole at each look costs what the logs weigh:
0.8 s of CPU for an hour-long campaign's 88,000 steps, on a machine whose cores the job's own
recovery needs at that moment (measured: a campaign's recoveries grew from 5.4 s to 10 s over
25 minutes, from that cost alone). So each file is read from where the last look stopped
(through lab.files: the node writes those files, and no link of theirs is followed), a line
still being written is kept for the next look, and a file that shrank (a fresh run in its
place) is read again from its start.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lab import files

CHUNK = 4 << 20


@dataclass
class Tail:
    directory: Path
    pattern: str = "rank*.jsonl"
    offsets: dict[str, int] = field(default_factory=dict)
    partial: dict[str, bytes] = field(default_factory=dict)

    def lines(self, whole: bool = False) -> Iterator[bytes]:
        """The complete lines appended since the last look: at most CHUNK of each file, so a look
        in a watcher's loop stays short; whole: all of it (a final read)."""
        names = sorted(self.directory.glob(self.pattern)) if self.directory.is_dir() else []
        for path in names:
            while (read := files.read_from(path, self.offsets.get(path.name, 0), CHUNK)) is not None:
                chunk, size = read
                if size < self.offsets.get(path.name, 0):  # replaced by a shorter file: start it again
                    self.offsets[path.name], self.partial[path.name] = 0, b""
                    continue
                self.offsets[path.name] = self.offsets.get(path.name, 0) + len(chunk)
                *complete, rest = (self.partial.get(path.name, b"") + chunk).split(b"\n")
                self.partial[path.name] = rest
                yield from complete
                if not whole or len(chunk) < CHUNK:
                    break

    def records(self, whole: bool = False) -> Iterator[dict]:
        """The JSON objects among those lines (a torn or foreign line is passed over)."""
        for line in self.lines(whole):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record
