"""What a user's script loaded after corrupt-checkpoint damaged one of its DCP steps, read from
the drill's record of the damage and rank 0's loads (lab.exercises.script.damaged). The run these
stand for: tests/user_scripts/dcp_checkpoint.py saving into ckpt/step5, ckpt/step10 of its work
dir, the drill mixing step10 with step5's shard, the script loading ckpt/step10 anyway."""

from __future__ import annotations

import pytest

from lab.exercises.script import damaged
from lab.report import Report

WORK = "/tmp/tlab/work/corrupt-checkpoint"


def checked(found: dict) -> tuple[bool, str]:
    report = Report("corrupt-checkpoint", "local", 4)
    damaged.check(report, found)
    (only,) = report.checks
    assert only.name == "it did not resume from the step the drill damaged"
    return only.ok, only.detail


def damage(mode: str, result: str = f"{WORK}/ckpt/step10/__0_0.distcp") -> list[dict]:
    return [
        {"fault": "pause_worker", "args": {"local_rank": 1}, "result": 4242},
        {"fault": "corrupt_checkpoint", "args": {"directory": f"{WORK}/ckpt", "mode": mode}, "result": result},
        {"fault": "kill_worker", "args": {"local_rank": 1, "sig": 9}, "result": 4242},
    ]


def test_a_script_that_loaded_the_mixed_step_is_told_what_a_careful_one_does():
    found = damaged.loaded_step(damage("mixed-steps"), ["ckpt/step10", "ckpt/step10"])
    assert found == {"damage": "mixed-steps", "step": "step10", "loaded": "ckpt/step10", "took_damaged": True}
    assert checked(found) == (
        False,
        "it loaded ckpt/step10, the step the drill damaged (mixed-steps): " + damaged.CAREFUL,
    )


def test_a_script_that_passed_over_a_step_without_metadata_is_said_to_have_done_so():
    faults = damage("no-metadata", f"{WORK}/ckpt/step10/.metadata")
    found = damaged.loaded_step(faults, [f"{WORK}/ckpt/step5"])
    assert found == {"damage": "no-metadata", "step": "step10", "loaded": f"{WORK}/ckpt/step5", "took_damaged": False}
    assert checked(found) == (True, f"it passed over the damaged step10 (no-metadata) and loaded {WORK}/ckpt/step5")


def test_a_step_named_like_the_tail_of_the_damaged_one_is_not_taken_for_it():
    found = damaged.loaded_step(damage("mixed-steps"), ["other/ckpt/step10"])
    assert found is not None and found["took_damaged"] is False


@pytest.mark.parametrize(
    ("faults", "loaded"),
    [
        (damage("truncate", f"{WORK}/ckpt/snapshot.pt"), ["ckpt/snapshot.pt"]),  # not a DCP step's damage
        (damage("mixed-steps"), []),  # nothing loaded after the fault
        ([{"fault": "kill_worker", "args": {"local_rank": 1}, "result": 1}], ["ckpt/step10"]),  # another drill
    ],
    ids=["truncate", "no-load", "kill-worker"],
)
def test_nothing_is_said_where_no_dcp_step_was_damaged_or_nothing_loaded(faults, loaded):
    assert damaged.loaded_step(faults, loaded) is None
    report = Report("corrupt-checkpoint", "local", 4)
    damaged.check(report, None)
    assert report.checks == []


def file_damage(at: float = 100.0) -> list[dict]:
    """The drill's record of a truncated file: a minGPT-style snapshot.pt in the work dir."""
    return [{"fault": "corrupt_checkpoint", "time": at, "args": {"mode": "truncate"}, "result": f"{WORK}/snapshot.pt"}]


def test_a_script_that_loads_the_damaged_file_and_fails_is_told_to_check_before_trusting():
    events = [
        {"event": "loaded", "time": 99.0, "rank": 0, "path": "snapshot.pt"},  # before the damage: not counted
        {"event": "load_failed", "time": 101.5, "rank": 2, "path": "snapshot.pt", "error": "OSError: [Errno 22] x. y"},
        {"event": "loaded", "time": 102.0, "rank": 0, "path": "older.pt"},
    ]
    found = damaged.loaded_file(file_damage(), events)
    assert found == {
        "path": f"{WORK}/snapshot.pt",
        "loaded": "snapshot.pt",
        "error": "OSError: [Errno 22] x. y",
        "took_damaged": True,
        "in_folder": False,
    }
    report = Report("corrupt-checkpoint", "local", 4)
    damaged.check_file(report, found)
    (only,) = report.checks
    assert not only.ok and only.detail.startswith(
        "it loaded snapshot.pt, the file the drill damaged, and it failed (OSError: [Errno 22] x)"
    )


def test_a_script_that_loads_another_file_after_the_damage_passes_and_a_dcp_damage_is_not_a_file_damage():
    events = [{"event": "loaded", "time": 101.0, "rank": 1, "path": "ckpt/epoch_2.pt"}]
    found = damaged.loaded_file(file_damage(), events)
    assert found["took_damaged"] is False and found["error"] is None
    dcp = [{**file_damage()[0], "args": {"mode": "no-metadata"}}]
    assert damaged.loaded_file(dcp, events) is None
    assert damaged.loaded_file(file_damage(at=200.0), events) is None  # nothing loaded after the damage


def test_a_dcp_folder_loaded_whole_after_a_file_in_it_was_truncated_is_the_damaged_one():
    """An FSDP2-style script loads its newest folder by name; the drill cut that folder's .metadata."""
    cut = [{**file_damage()[0], "result": f"{WORK}/checkpoints/dcp_api/1796/.metadata"}]
    events = [{"event": "load_failed", "time": 101.0, "rank": 0, "path": "checkpoints/dcp_api/1796", "error": "E"}]
    found = damaged.loaded_file(cut, events)
    assert found["took_damaged"] is True and found["in_folder"] is True
    events[0]["path"] = "checkpoints/dcp_api/1795"
    assert damaged.loaded_file(cut, events)["took_damaged"] is False


def test_a_truncated_file_of_a_dcp_step_loaded_by_its_folder_gets_the_dcp_advice_not_the_single_files():
    """Recorded in containers: tests/user_scripts/dcp_checkpoint.py, step10's .metadata truncated,
    the script loading ckpt/step10 and failing; the advice is a manifest for the step, as for
    shards of two steps, not a checksum of one file."""
    cut = [{**file_damage()[0], "result": f"{WORK}/ckpt/step10/.metadata"}]
    events = [{"event": "load_failed", "time": 101.0, "rank": 0, "path": "ckpt/step10", "error": "E: metadata is None"}]
    report = Report("corrupt-checkpoint", "docker", 4)
    damaged.check_file(report, damaged.loaded_file(cut, events))
    (only,) = report.checks
    assert not only.ok and only.detail.endswith(damaged.CAREFUL) and "checkpoint_dcp.py" in only.detail
    assert damaged.CAREFUL_FILE not in only.detail
