"""The py-hang fault (lab.health.injected_error, SIGRTMIN+7) in a real child: its main thread
stops for good, while its other threads and its signal handlers go on running. That is what
tells it apart from the GIL hang and SIGSTOP, where nothing of the rank runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import wait_for as wait_until

from lab.health import injected_error

CHILD = textwrap.dedent(
    """
    import signal, sys, threading, time
    from pathlib import Path
    from lab.health import injected_error
    injected_error.install()
    out = Path(sys.argv[1])
    def put(name, text):  # whole or not at all: a reader never sees the file half written
        (out / f".{name}").write_text(text)
        (out / f".{name}").replace(out / name)
    signal.signal(signal.SIGTERM, lambda *_: put("handled", "SIGTERM"))
    wait = signal.getsignal(injected_error.WAIT_SIGNAL)  # the fault's own handler, marked on its way in
    signal.signal(injected_error.WAIT_SIGNAL, lambda *a: (put("waiting", "1"), wait(*a)))
    def tick():
        while True:
            put("thread", str(time.monotonic()))
            time.sleep(0.05)
    threading.Thread(target=tick, daemon=True).start()
    while True:
        put("main", str(time.monotonic()))
        time.sleep(0.05)
    """
)


def newest(path: Path) -> float:
    return float(path.read_text())


def wait_for(path: Path, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path.name} never written"
        time.sleep(0.05)


def test_the_main_thread_waits_for_ever_and_the_rest_of_the_rank_runs(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], env=env)
    try:
        wait_for(tmp_path / "main")
        wait_for(tmp_path / "thread")
        child.send_signal(injected_error.WAIT_SIGNAL)
        wait_for(tmp_path / "waiting")  # the main thread is in the handler: its loop writes no more
        stopped_at, thread_at = newest(tmp_path / "main"), newest(tmp_path / "thread")
        wait_until(lambda: newest(tmp_path / "thread") > thread_at + 0.5, 20.0, "the other thread to run on")
        assert newest(tmp_path / "main") == stopped_at  # the loop never came back
        child.send_signal(signal.SIGTERM)
        wait_for(tmp_path / "handled", 5.0)  # the handler ran inside the wait
        assert child.poll() is None and newest(tmp_path / "main") == stopped_at  # and it waits on
    finally:
        child.kill()
        child.wait()
