"""The event log: one JSON object per line, one file per rank, appended across restarts.

Exercises and tests read these to reconstruct what happened and when: every record
has the wall-clock time, the rank, the node and the restart attempt it belongs to.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class EventLog:
    def __init__(self, directory: str | os.PathLike | None, rank: int, local_rank: int):
        self.path = Path(directory) / f"rank{rank}.jsonl" if directory else None
        self.common: dict[str, Any] = {
            "rank": rank,
            "local_rank": local_rank,
            # The lab's node name where the lab started us (loopback nodes share a hostname).
            "node": os.environ.get("TORCHRUN_LAB_NODE") or socket.gethostname(),
            "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
            "pid": os.getpid(),
        }
        self._common_json = json.dumps(self.common)[1:-1]  # the fields between the braces
        self._file = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._end_torn_line()
            # Line-buffered append: each record reaches the file in one write() as it ends.
            self._file = open(self.path, "a", buffering=1)

    def _end_torn_line(self) -> None:
        """A process killed mid-write leaves a partial last line; start ours on a fresh one."""
        assert self.path is not None
        try:
            with open(self.path, "rb+") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
        except (FileNotFoundError, OSError):
            pass

    def write(self, event: str, **fields) -> None:
        if self._file is None:
            return
        record = {"time": time.time(), "event": event, **self.common, **fields}
        self._file.write(json.dumps(record) + "\n")

    def step(self, step: int, loss: float, seconds: float) -> None:
        """The record every training step writes: `write("step", ...)`'s line, formatted directly.

        Building the dict and json.dumps-ing it took 24 us a step inside the trainer on the
        lab's machines; this takes 16 (`lab bench overhead`). repr() of a finite float is
        its JSON form; NaN and infinities go through json.dumps, which spells them as
        Python's json reads them back.
        """
        if self._file is None:
            return
        loss_text = repr(loss) if math.isfinite(loss) else json.dumps(loss)
        self._file.write(
            f'{{"time": {time.time()!r}, "event": "step", {self._common_json}, "step": {step}, '
            f'"loss": {loss_text}, "seconds": {seconds!r}}}\n'
        )


def read_events(directory: str | os.PathLike) -> Iterator[dict]:
    """Every record from every rank's file, in time order. A torn last line is skipped."""
    records = []
    for path in sorted(Path(directory).glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return iter(sorted(records, key=lambda r: r["time"]))
