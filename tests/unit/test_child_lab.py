"""A bench that runs a lab command as its child, stopped mid-way, lets the child tear down
(lab.procs.run_child_lab): a real parent and child, a real SIGTERM. subprocess.run would have
SIGKILLed the child, and a stopped `lab bench chaos` left its campaign's nodes running."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from conftest import REPO

CHILD = textwrap.dedent(
    """
    import signal, sys, time
    def tear_down(*_):
        time.sleep(0.5)  # a teardown takes a while
        open(sys.argv[1], "w").write("torn down")
        sys.exit(130)
    signal.signal(signal.SIGINT, tear_down)
    print("up", flush=True)
    time.sleep(60)
    """
)
PARENT = textwrap.dedent(
    """
    import signal, sys
    from lab.procs import Stopped, run_child_lab, stop_on
    stop_on(signal.SIGTERM)
    try:
        run_child_lab([sys.executable, "-c", sys.argv[1], sys.argv[2]])
    except Stopped:
        sys.exit(143)
    """
)


def test_a_stopped_parent_asks_its_child_lab_to_stop_and_waits_for_its_teardown(tmp_path):
    mark = tmp_path / "mark"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD, str(mark)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None and parent.stdout.readline().strip() == "up"
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(30) == 143
    assert mark.read_text() == "torn down"  # the child's teardown finished before the parent ended
    time.sleep(0.1)
    assert subprocess.run(["pgrep", "-f", str(mark)], capture_output=True).stdout == b""
