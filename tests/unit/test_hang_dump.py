"""A rank's forensics thread (lab.health.hang_dump) answers the requests made of it, and not one
made before it started: a spare that replaced a frozen rank (in-process recovery) once answered
the request made of the rank it replaced, and the drill saw no silent rank."""

from __future__ import annotations

import json
import time

from lab.health import hang_dump


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
