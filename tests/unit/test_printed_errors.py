"""Exceptions a script printed itself, with no `[rankN]:` (lab.node_log.PrintedErrors), and the exit
record of a script that exited with a status after a wrapper printed one (lab.node.user_script):
Hydra's trimmed traceback and its "Set the environment variable HYDRA_FULL_ERROR=1" trailer, a
`logging.exception` then `sys.exit(1)`, a `traceback.print_exc()` then `os._exit(2)`. The lines
are the ones real runs printed (tests/fixtures/natural/, recorded by scripts/record-natural.sh)."""

from __future__ import annotations

import collections
from pathlib import Path

from lab.health.events import ExitReason
from lab.node.user_script import STDERR_KEPT, failed_exit
from lab.node_log import PrintedErrors, bare_errors

NATURAL = Path(__file__).resolve().parents[1] / "fixtures" / "natural"


def node_log(case: str) -> list[str]:
    return (NATURAL / case / "nodes" / "node0" / "node.log").read_text().splitlines()


def printed_by_rank_1(case: str, until: str) -> list[str]:
    """The failing rank's own lines: from its traceback's start to the line holding `until`."""
    lines = node_log(case)
    start = next(i for i, line in enumerate(lines) if line.startswith(("Error executing job", "Traceback", "20")))
    end = next(i for i, line in enumerate(lines) if until in line and i > start)
    return lines[start : end + 1]


def fed(lines: list[str]) -> PrintedErrors:
    printed = PrintedErrors()
    for line in lines:
        printed.feed(line)
    return printed


def test_the_exception_behind_hydras_trailer_is_found_at_the_scripts_line():
    errors = dict(bare_errors("\n".join(node_log("hydra_app_raises"))))
    assert errors["ValueError: shard 1: batch 4 holds no samples"].endswith("hydra_app_raises.py:21")
    assert any(error.startswith("RuntimeError:") and "Connection closed by peer" in error for error in errors)


def test_an_exception_past_frames_of_the_standard_library_is_still_the_scripts():
    """json's three frames lie between the script's line and JSONDecodeError (a miss before)."""
    errors = dict(bare_errors("\n".join(node_log("traceback_then_hard_exit"))))
    error = next(e for e in errors if e.startswith("json.decoder.JSONDecodeError"))
    assert errors[error].endswith("traceback_then_hard_exit.py:19")


def test_torchruns_own_traceback_is_not_the_scripts():
    assert not [e for e, _ in bare_errors("\n".join(node_log("hydra_app_raises"))) if "ChildFailedError" in e]


def test_a_script_that_exits_after_hydra_printed_its_exception_died_of_that_exception():
    lines = printed_by_rank_1("hydra_app_raises", "HYDRA_FULL_ERROR")
    tail = collections.deque([line for line in lines if line.strip()], maxlen=STDERR_KEPT)
    record = failed_exit(1, 1, tail, fed(lines))
    assert record["reason"] == ExitReason.EXCEPTION and record["code"] == 1
    assert record["error"] == "ValueError: shard 1: batch 4 holds no samples"
    assert record["where"].endswith("hydra_app_raises.py:21")


def test_a_logged_traceback_then_sys_exit_died_of_the_logged_exception():
    lines = printed_by_rank_1("logged_traceback_then_exits", "ZeroDivisionError")
    record = failed_exit(1, 1, collections.deque(lines[-STDERR_KEPT:]), fed(lines))
    assert record["reason"] == ExitReason.EXCEPTION and record["error"] == "ZeroDivisionError: division by zero"
    assert record["where"].endswith("logged_traceback_then_exits.py:24")


def test_an_error_logged_without_a_traceback_stays_an_exit_status_in_its_own_words():
    lines = ["INFO starting", "ERROR cannot open shard /data/train-00001.bin: no such file"]
    record = failed_exit(1, 1, collections.deque(lines), fed(lines))
    assert record == {"reason": ExitReason.EXIT_STATUS, "code": 1, "stderr": lines}


def test_a_traceback_printed_long_before_the_exit_is_not_what_the_script_died_of():
    lines = printed_by_rank_1("hydra_app_raises", "HYDRA_FULL_ERROR")
    later = [*lines, *[f"WARNING retrying shard {n}" for n in range(STDERR_KEPT)], "ERROR giving up"]
    record = failed_exit(3, 3, collections.deque(later[-STDERR_KEPT:]), fed(later))
    assert record["reason"] == ExitReason.EXIT_STATUS and record["stderr"][-1] == "ERROR giving up"


def test_sys_exit_with_a_message_keeps_the_message_python_prints_after_the_record():
    record = failed_exit(1, "config.yaml: no such file", collections.deque(["INFO loading"]), PrintedErrors())
    assert record["stderr"] == ["INFO loading", "config.yaml: no such file"]
