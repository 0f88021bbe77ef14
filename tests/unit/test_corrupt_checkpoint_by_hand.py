"""corrupt-checkpoint's judge on runs written by hand (tests/unit/drill_runs.py): the damage it
reports, the steps lost, the previous checkpoint at the edge of having one, each check's detail.
The recorded runs left these unread (docs/mutation.md). No process runs."""

from __future__ import annotations

from drill_runs import FAULT, finished, rec, seen_of

from lab.exercises import DrillOptions, corrupt_checkpoint
from lab.report import Check
from lab.topology import Topology

NEWEST = "/run/checkpoints/step_00000020.pt"
TOPOLOGY = Topology(nodes=2, nproc_per_node=2, rdzv_backend="lab")


def faults(args: dict) -> list[dict]:
    """Paused, the newest checkpoint damaged, then killed at 10 s."""
    return [
        {"fault": "pause_worker", "node": "node0", "time": FAULT - 0.5, "args": {"local_rank": 1}, "rank": 1},
        {"fault": "corrupt_checkpoint", "node": "node0", "time": FAULT - 0.25, "args": args, "result": NEWEST},
        {"fault": "kill_worker", "node": "node0", "time": FAULT, "args": {"local_rank": 1, "sig": 9}, "rank": 1},
    ]


def damaged_run(saved=(10, 20), loads=(10,), invalid=True, args=None):
    """Saves before the kill, step 25 reached; the new group finds the newest damaged (when
    `invalid`) and rank 0 loads `loads`, one a restart; its first step 2 s after the kill."""
    events = [rec(1.0 + i * 0.5, "checkpoint_saved", step=s) for i, s in enumerate(saved)]
    events += [rec(9.0, "step", step=25), rec(FAULT + 0.75, "rendezvous_done", 0, 1)]
    if invalid:
        events.append(rec(FAULT + 1.0, "checkpoint_invalid", 0, 1, path=NEWEST, reason="truncated: 12 of 4096 bytes"))
    events += [rec(FAULT + 1.25, "checkpoint_loaded", 0, i + 1, step=s) for i, s in enumerate(loads)]
    events += [rec(FAULT + 2.0, "step", 0, 1, step=11), *finished(FAULT + 20.0, range(4))]
    return seen_of("corrupt-checkpoint", TOPOLOGY, faults({} if args is None else args), events)


def judged(seen):
    return corrupt_checkpoint.judge(seen, DrillOptions(target_rank=1, at_step=25))


def test_the_damage_the_steps_lost_and_the_previous_checkpoint_are_reported():
    report = judged(damaged_run())
    assert report.facts["damage"] == {"how": "truncate", "path": NEWEST}  # truncate: the damage when none is named
    assert report.facts["lost_steps"] == 15 and report.facts["restarts"] == 1
    assert report.facts["recovery"]["total"] == 2.0
    assert report.checks[:3] == [
        Check("the job succeeded", True, "exit codes {'node0': 0, 'node1': 0}"),
        Check("the damaged checkpoint was detected", True, "truncated: 12 of 4096 bytes"),
        Check("resumed from the previous checkpoint", True, "saved [10, 20], loaded [10]"),
    ]
    assert judged(damaged_run(args={"mode": "flip"})).facts["damage"] == {"how": "flip", "path": NEWEST}


def test_with_three_saves_the_one_before_the_newest_counts_and_the_detail_shows_those_two():
    report = judged(damaged_run(saved=(10, 20, 30), loads=(20,)))
    assert report.checks[2] == Check("resumed from the previous checkpoint", True, "saved [20, 30], loaded [20]")
    assert report.facts["lost_steps"] == 5


def test_with_one_save_there_is_no_previous_checkpoint_to_resume_from():
    report = judged(damaged_run(saved=(20,), loads=(20,)))
    assert report.checks[2] == Check("resumed from the previous checkpoint", False, "saved [20], loaded [20]")


def test_the_first_load_after_the_kill_is_the_resume():
    report = judged(damaged_run(loads=(10, 20)))  # a second restart loaded another
    assert report.checks[2] == Check("resumed from the previous checkpoint", True, "saved [10, 20], loaded [10]")


def test_no_damage_found_and_nothing_loaded_are_each_said():
    report = judged(damaged_run(loads=(), invalid=False))
    assert report.checks[1] == Check("the damaged checkpoint was detected", False, "no checkpoint_invalid event")
    assert report.checks[2] == Check("resumed from the previous checkpoint", False, "saved [10, 20], loaded []")
    assert report.facts["lost_steps"] is None
