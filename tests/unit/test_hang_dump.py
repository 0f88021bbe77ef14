"""A rank's forensics thread (lab.health.hang_dump) answers the requests made of it, and not one
made before it started: a spare that replaced a frozen rank (in-process recovery) once answered
the request made of the rank it replaced, and the drill saw no silent rank."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lab.exercises import forensics
from lab.health import hang_dump

NOBODY = 65534
REPO = Path(__file__).resolve().parents[2]


def wait_for_answer(path, request: str, within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if json.loads(path.read_text())["request"] == request:
                return True
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    return False


def test_a_rank_answers_only_requests_made_after_it_started(tmp_path):
    directory = tmp_path / hang_dump.DIRECTORY
    directory.mkdir()
    (directory / "request").write_text("1.000000")  # asked of the rank this one replaces
    hang_dump.install(tmp_path, rank=7)
    answer = directory / "rank7.json"
    assert not wait_for_answer(answer, "1.000000", within_s=4 * hang_dump.POLL_S)
    (directory / "request").write_text("2.000000")
    assert wait_for_answer(answer, "2.000000")
    record = json.loads(answer.read_text())
    assert record["rank"] == 7 and "MainThread" in record["stacks"]


RANK_AS_ANOTHER_USER = """
import sys, time
import torch.distributed  # as a rank has: its dump reads the Flight Recorder through it
from lab.health import hang_dump
hang_dump.install(sys.argv[1], rank=0)
print("installed", flush=True)
time.sleep(30)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the case is root's controller and a container's user")
def test_a_rank_of_another_user_answers_the_root_controller():
    """As in a container: the events dir is handed to the image's user, the ranks run as it,
    and the controller, root, asks. The forensics folder was once made by the controller, root's,
    and no rank in a container could answer in it (hang-rank failed on docker)."""
    top = Path(tempfile.mkdtemp(prefix="tlab-hang-dump-"))  # pytest's own are root's alone (0700)
    top.chmod(0o755)
    events = top / "events"
    events.mkdir()
    os.chown(events, NOBODY, NOBODY)
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    rank = subprocess.Popen(
        [*drop, sys.executable, "-c", RANK_AS_ANOTHER_USER, str(events)],
        cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert rank.stdout is not None and rank.stdout.readline() == "installed\n"
        found = forensics.collect(events, world_size=1, wait_s=20)  # it returns once the rank answered
        assert found["answered"] == [0] and found["silent"] == [], found
    finally:
        rank.kill()
        rank.wait()
        shutil.rmtree(top)


def test_a_request_made_the_moment_install_returns_is_answered(tmp_path):
    """The thread once read the current request as its starting point when it first ran: on a
    loaded machine that was after the controller's first request, which it then took for one
    made before it started, and never answered (a CI run of the case above)."""
    directory = tmp_path / hang_dump.DIRECTORY
    for rank in range(5):  # each time, the request lands before the new thread has run
        hang_dump.install(tmp_path, rank=rank)
        (directory / "request").write_text(f"{rank + 1}.000000")
        assert wait_for_answer(directory / f"rank{rank}.json", f"{rank + 1}.000000"), rank
