"""The copier of a lab on Ray machines without a shared disk: a process on the driver's machine.

    python -m lab.runtimes.ray_follower RUN_DIR

`lab up` (or `lab run`, a drill) starts it once the nodes run (RayRuntime.start_nodes); it copies
what the nodes on disks of their own wrote into RUN_DIR every half second (ray_mirror.Mirror),
outliving a detached `lab up`, until `lab down` stops it (it carries the run dir's mark) or the
run dir is gone.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lab import files
from lab.errors import LabError
from lab.rundir import MARKER, RunDir
from lab.runtimes.ray_calls import connect
from lab.runtimes.ray_mirror import KNOWN_DIR, PERIOD_S, Mirror
from lab.runtimes.ray_node import recorded_actors


def start_follower(run_dir: Path) -> subprocess.Popen:
    """This machine's copier for the lab at run_dir, in a session of its own, its output in the
    run dir's KNOWN_DIR."""
    files.put_beneath(run_dir, f"{KNOWN_DIR}/lock", b"", 0)
    log = files.open_nofollow(run_dir / KNOWN_DIR / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        argv = [sys.executable, "-m", "lab.runtimes.ray_follower", str(run_dir)]
        env = {**os.environ, MARKER: str(run_dir)}
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env)
    finally:
        os.close(log)


def follow(run_dir: Path) -> None:
    """Copy the recorded nodes' files every PERIOD_S while the lab is up."""
    lab = RunDir(run_dir)
    state = lab.read_state() or {}
    connect(state.get("ray_address"))
    agents = recorded_actors(lab.lab_id, [n for n in state.get("nodes", []) if n.get("own_disk")])
    mirror = Mirror(run_dir, agents)
    while agents and (run_dir / KNOWN_DIR).is_dir():
        time.sleep(PERIOD_S)
        mirror.sync()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m lab.runtimes.ray_follower", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("run_dir", type=Path, help="the lab's run dir on this machine")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        follow(parser.parse_args().run_dir)
    except LabError as e:
        sys.exit(f"ray_follower: {e}")
