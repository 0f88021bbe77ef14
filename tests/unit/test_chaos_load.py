"""The busy processes of --load: running while their starter runs, gone once it is SIGKILLed (it
runs no teardown then), whether or not a lab's run dir marks them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

STARTER = """
import os, sys, time
from lab.chaos import load
with load.busy(2, sys.argv[1] or None) as running:
    time.sleep(0.3)
    me = os.getpid()
    print(open(f"/proc/{me}/task/{me}/children").read(), running(), flush=True)
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("run_dir", ["", "/tmp/some-lab-run-dir"])
def test_the_load_runs_beside_its_starter_and_ends_by_itself_when_the_starter_is_killed(run_dir):
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, run_dir], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    pids: list[int] = []
    try:
        assert starter.stdout is not None
        line = starter.stdout.readline().split()
        pids[:], running = [int(p) for p in line[:-1]], int(line[-1])
        assert len(pids) == 2 and running == 2 and all(alive(p) for p in pids)
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        deadline = time.monotonic() + 30
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in pids), "the busy loops outlived their starter"
    finally:
        starter.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
