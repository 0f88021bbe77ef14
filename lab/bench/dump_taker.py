"""Raw Flight Recorder dumps taken all along a job whose hang comes when it comes.

A natural case (lab.bench.natural) hangs at a moment of its own script's choosing, and its
ranks are gone once their own timeouts fire. So while `lab run` runs it, every rank is asked
for its dumps each INTERVAL_S, and the raw dumps of the ranks that answered the latest request
replace the ones before: when the job has ended, what is kept is the last state its ranks were
seen in, as torch's analyzer would get it from dumps written at a timeout.

    with DumpTaker(run_dir / "events", world_size, into):
        run the job
    verdict = flight_recorder.analyze(into)
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from lab.bench import flight_recorder
from lab.exercises import forensics

INTERVAL_S = 1.0
ANSWER_S = 1.0  # how long one request waits for the ranks: a stopped rank never answers


class DumpTaker:
    def __init__(self, events_dir: Path, world_size: int, into: Path):
        self.events_dir, self.world_size, self.into = events_dir, world_size, into
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.take_all_along, name="dump-taker", daemon=True)
        self.taken = 0  # requests some rank answered

    def __enter__(self) -> DumpTaker:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def take_all_along(self) -> None:
        while not self.stop.wait(INTERVAL_S):
            if not self.events_dir.is_dir():  # the job is not up yet
                continue
            answered = forensics.collect(self.events_dir, self.world_size, ANSWER_S)["answered"]
            if not answered:
                continue
            fresh = self.into.with_name(self.into.name + ".new")
            shutil.rmtree(fresh, ignore_errors=True)
            if flight_recorder.copy_dumps(self.events_dir, answered, fresh):
                shutil.rmtree(self.into, ignore_errors=True)
                fresh.rename(self.into)
                self.taken += 1
