"""--load N: N busy processes beside the job, so a campaign meets a machine as CI has it.

Each is a Python loop in a session of its own, carrying the lab's mark (so `lab down` stops
it after a crash too), and is stopped by the campaign's teardown whatever happens. They start
once the lab has taken its run dir over: started before, the take-over's sweep of an earlier
lab's leftovers killed them at once, and every campaign "with load" ran without any (found
when a ledger said 2 busy processes and `ps` showed none). busy() yields a check that says
whether all of them are still running: the campaign's report says so. Each also ends by itself
once the process that started it is gone (SIGKILLed, it runs no teardown): a bench's load has
no run dir of a lab to carry (lab bench recovery --load)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from lab.rundir import MARKER

# A busy loop that looks up every million turns (some tens of milliseconds) whether its parent is still there.
BUSY = (
    "import itertools, os, sys\n"
    "parent = int(sys.argv[1])\n"
    "for turn in itertools.count():\n"
    "    if turn % 1_000_000 == 0 and os.getppid() != parent:\n"
    "        break\n"
)


@contextmanager
def busy(count: int, run_dir: str | None) -> Iterator[Callable[[], int]]:
    """run_dir: the lab whose mark they carry (None: a bench's, which no lab stops)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUSY, str(os.getpid())],
            env={**os.environ, **({MARKER: run_dir} if run_dir else {})},
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield lambda: sum(1 for p in procs if p.poll() is None)  # how many still run
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: nothing of it stays
            except ProcessLookupError:
                pass
            proc.wait()
