"""A second Ctrl-C (or SIGTERM) during the teardown the first one started is answered in words
and cuts nothing short (issue 52, item 9: two Ctrl-Cs left namespaces, rules and processes).
The handler runs in a real interpreter, signalled for real."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = """
import os, signal, sys, time
from lab.procs import Stopped, stop_on

stop_on(signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
try:
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    time.sleep(5)
    print("not stopped")
except Stopped as e:
    for _ in range(3):  # the teardown, signalled again and again
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
        time.sleep(0.05)
    print("teardown finished after", signal.Signals(e.signum).name)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_during_the_teardown_changes_nothing(sig):
    done = subprocess.run([sys.executable, "-c", CHILD, sig], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"teardown finished after {sig}"
    assert done.stderr.count(f"still stopping what it started ({sig} again changes nothing)") == 3


def test_a_child_started_during_the_teardown_gets_the_default_handlers():
    """The second signal's handler is Python's, not SIG_IGN, which exec would hand on."""
    code = CHILD.replace(
        'print("teardown finished after"',
        'print(subprocess.run(["grep", "SigIgn", "/proc/self/status"], capture_output=True, text=True).stdout); '
        'print("teardown finished after"',
    ).replace("import os,", "import subprocess, os,")
    done = subprocess.run([sys.executable, "-c", code, "SIGINT"], capture_output=True, text=True, timeout=60)
    ignored = int(done.stdout.split()[1], 16)
    assert not ignored & (1 << (2 - 1)) and not ignored & (1 << (15 - 1))  # SIGINT, SIGTERM not ignored
