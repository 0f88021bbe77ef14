"""A rank's heartbeat as its keeper hears it (lab.inprocess.heartbeat): real processes, a real
pipe, a real SIGSTOP. A frozen rank falls silent; a rank waiting with its GIL free does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from lab.inprocess import heartbeat

BEATING = """
import sys, time
from lab.inprocess import heartbeat
heartbeat.start_beating(int(sys.argv[1]))
print("beating", flush=True)
time.sleep(60)  # a rank waiting in a collective: its GIL is free
"""


def start_child(ear: heartbeat.Ear) -> subprocess.Popen:
    read, write = ear.new_pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", BEATING, str(write)], pass_fds=(write,), stdout=subprocess.PIPE, text=True
    )
    os.close(write)
    ear.listen(child.pid, read)
    assert child.stdout is not None and child.stdout.readline() == "beating\n"
    return child


def test_a_waiting_rank_beats_and_a_stopped_one_falls_silent():
    ear = heartbeat.Ear()
    child = start_child(ear)
    try:
        time.sleep(3 * heartbeat.BEAT_S)
        assert ear.silent_for(child.pid) < 2 * heartbeat.BEAT_S + 0.5
        child.send_signal(signal.SIGSTOP)
        time.sleep(0.1)  # a beat sent just before the stop may still be on its way
        stopped_at = time.monotonic()
        time.sleep(1.0)
        # Read late on purpose: a beat is dated when sent, not when the keeper reads it.
        assert ear.silent_for(child.pid) >= time.monotonic() - stopped_at
        child.send_signal(signal.SIGCONT)
        time.sleep(3 * heartbeat.BEAT_S)
        assert ear.silent_for(child.pid) < 2 * heartbeat.BEAT_S + 0.5
    finally:
        child.kill()
        child.wait()
        ear.close()


def test_a_rank_is_judged_only_once_it_has_beaten():
    ear = heartbeat.Ear()
    read, write = ear.new_pipe()
    ear.listen(12345678, read)  # nothing writes: a process still importing torch
    try:
        assert ear.silent_for(12345678, now=time.monotonic() + 100) == 0.0
    finally:
        os.close(write)
        ear.close()


def test_frozen_means_a_third_of_the_timeout_and_never_under_the_floor():
    assert heartbeat.frozen_after(60) == 20
    assert heartbeat.frozen_after(10) < 10 / 2  # the kill lands while the peers still wait
    assert heartbeat.frozen_after(1) == heartbeat.MIN_FROZEN_S
