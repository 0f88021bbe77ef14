"""--load N: N busy processes beside the job, so a campaign meets a machine as CI has it.

Each is a Python loop in a session of its own, carrying the lab's mark (so `lab down` stops
it after a crash too), and is stopped by the campaign's teardown whatever happens."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from lab.rundir import MARKER

BUSY = "import itertools\nfor _ in itertools.count(): pass\n"


@contextmanager
def busy(count: int, run_dir: str) -> Iterator[list[int]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUSY],
            env={**os.environ, MARKER: run_dir},
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: nothing of it stays
            except ProcessLookupError:
                pass
            proc.wait()
