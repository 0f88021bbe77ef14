"""hang-rank's judge on runs written by hand (tests/unit/drill_runs.py): what it reports of a hang
under a restart and under the step watchdog (in-process and in Python:
test_hang_rank_in_process_by_hand.py), each fact worked out by hand
from the records beside it. Mutation testing showed the recorded runs left these unread: the
facts people read in report.json, each check's detail, the bounds at their edges, and which
recovery the explanation names (docs/mutation.md). No process runs."""

from __future__ import annotations

import pytest
from drill_runs import FAULT, FOUND, FREEZE, agent, finished, rec, regrouped, seen_of

from lab.exercises import DrillOptions, hang_rank
from lab.health.events import AgentEvent
from lab.report import Check
from lab.topology import Topology

TIMEOUT = hang_rank.PG_TIMEOUT_S
TUNED = Topology(nodes=2, nproc_per_node=2, rdzv_backend="lab")
TORCHRUN = Topology(nodes=2, nproc_per_node=2)


def judged(seen):
    return hang_rank.judge(seen, DrillOptions(target_rank=1, at_step=25))


def restarted(detected_after: float | None = 10.5, seen_down_after: float | None = 1.5, **change):
    """Frozen at 10 s; Prometheus sees it 1.5 s later; the timeout fires 10.5 s in; the agents
    regroup a quarter second apart, stage by stage; rank 0 (and rank 1) load step 20; the first
    step 12 s after the freeze. `change` replaces records by name."""
    topology, back = change.pop("topology", TUNED), FAULT + 10.5
    parts = {
        "before": [rec(8.0, "checkpoint_saved", step=20), rec(9.0, "step", step=25)],
        "other_agent": [agent(FAULT + 0.25, "keep_alive", "node1")],  # not the failure
        "detected": [agent(FAULT + detected_after, AgentEvent.FAILURE_DETECTED)] if detected_after else [],
        "regroup": regrouped(back + 0.25),
        "start": [rec(back + 0.5, "start", r, 1) for r in range(4)],
        "ready": [rec(back + 0.75, "rendezvous_done", r, 1) for r in range(4)],
        "loaded": [
            rec(back + 1.0, "checkpoint_loaded", 0, 1, step=20),
            rec(back + 1.0, "checkpoint_loaded", 1, 1, step=20),
        ],
        "first_step": [rec(FAULT + 12.0, "step", 0, 1, step=21)],
        "end": finished(FAULT + 20.0, range(4)),
    }
    parts.update(change)
    events = [
        r for name, records in parts.items() if name not in ("other_agent", "detected", "regroup") for r in records
    ]
    agents = parts["other_agent"] + parts["detected"] + parts["regroup"]
    down = FAULT + seen_down_after if seen_down_after is not None else None
    return seen_of(
        "hang-rank",
        topology,
        [FREEZE],
        events,
        agents=agents,
        extra={"forensics": FOUND, "prometheus_saw_it_at": down},
    )


def test_a_hang_under_the_tuned_restart_reports_each_stage_and_says_so():
    report = judged(restarted())
    assert report.facts["forensics"] is FOUND
    assert report.facts["seconds_until_prometheus_saw_it"] == 1.5
    assert report.facts["seconds_until_the_timeout_fired"] == 10.5
    assert report.facts["restarts"] == 1
    assert report.facts["recovery"] == {
        "detect": 10.5,
        "teardown": 0.25,
        "rendezvous": 0.25,
        "worker_init": 0.25,
        "checkpoint_load": 0.25,
        "first_step": 0.5,
        "total": 12.0,
    }
    assert report.checks[:5] == [
        Check(hang_rank_forensics(), True, FOUND["finding"]),
        Check("Prometheus saw the frozen rank down before the group restarted", True, "1.5 s after the freeze"),
        Check(
            f"the {TIMEOUT} s process-group timeout, not gloo's 30 minutes, ended the wait",
            True,
            "failure detected after 10.5 s",
        ),
        Check("the group restarted and resumed from a checkpoint", True, "restarts 1, loaded [20]"),
        Check("the job succeeded", True, "exit codes {'node0': 0, 'node1': 0}"),
    ]
    assert report.verdict == "pass"
    assert "its agent waits 5 s before SIGKILL (the lab's tuned restart waits that long)" in report.explanation
    assert report.explanation.startswith(f"the peers' all-reduce timed out after the {TIMEOUT} s process-group timeout")
    assert report.explanation.endswith("(--watchdog SECONDS ends it sooner)")


def hang_rank_forensics() -> str:
    return "forensics named the frozen rank, and the collective the others wait in"


def test_under_torchruns_own_rendezvous_the_explanation_names_torchruns_30_s():
    report = judged(restarted(topology=TORCHRUN))
    assert "its agent waits 30 s before SIGKILL (torchrun waits that long)" in report.explanation


@pytest.mark.parametrize(("after", "ok"), [(TIMEOUT + 14.75, True), (TIMEOUT + 15, False)])
def test_the_timeout_must_fire_within_15_s_of_its_setting(after, ok):
    check = judged(restarted(detected_after=after)).checks[2]
    assert (check.ok, check.detail) == (ok, f"failure detected after {after:.1f} s")


def test_a_hang_no_agent_saw_fail_reports_no_time_rather_than_one():
    report = judged(restarted(detected_after=None))
    assert report.facts["seconds_until_the_timeout_fired"] is None
    assert report.checks[2] == Check(
        f"the {TIMEOUT} s process-group timeout, not gloo's 30 minutes, ended the wait",
        False,
        "failure detected after 0.0 s",
    )


def test_prometheus_must_see_it_strictly_before_the_first_step_of_the_new_group():
    at_the_step = judged(restarted(seen_down_after=12.0)).checks[1]
    assert (at_the_step.ok, at_the_step.detail) == (False, "12.0 s after the freeze")
    # The new group's other records (its start, 10.5 s in) are not its first step.
    assert judged(restarted(seen_down_after=11.75)).checks[1].ok
    unseen = judged(restarted(seen_down_after=None))
    assert unseen.facts["seconds_until_prometheus_saw_it"] is None
    assert "Prometheus saw the frozen rank down before the group restarted" not in [c.name for c in unseen.checks]


def test_a_group_that_never_stepped_again_is_no_recovery():
    report = judged(restarted(first_step=[], end=[]))
    assert report.facts["recovery"]["total"] is None
    assert report.checks[1].ok  # Prometheus saw it, and there was no step to come after


def test_the_resume_is_read_from_rank_0s_load_in_the_new_group():
    only_rank_0 = judged(restarted(loaded=[rec(FAULT + 11.5, "checkpoint_loaded", 0, 1, step=20)]))
    assert only_rank_0.checks[3] == Check(
        "the group restarted and resumed from a checkpoint", True, "restarts 1, loaded [20]"
    )
    others_only = judged(restarted(loaded=[rec(FAULT + 11.5, "checkpoint_loaded", 2, 1, step=20)]))
    assert others_only.checks[3] == Check(
        "the group restarted and resumed from a checkpoint", False, "restarts 1, loaded []"
    )


WATCHED = Topology(nodes=2, nproc_per_node=2, rdzv_backend="lab", step_watchdog_s=3)
RERUN_AT = FAULT + 5.0


def watched(ended_after: float = 4.0234375, codes: dict | None = None, **change):
    """--watchdog 3: every agent SIGKILLed 4.0234375 s after the freeze, the job started again at
    15 s, rank 0's load recorded at that very instant, its first step 16.5 s in."""
    parts = {
        "before": [rec(8.0, "checkpoint_saved", step=20), rec(9.0, "step", step=25)],
        "start": [rec(RERUN_AT, "start", r) for r in range(4)],
        "loaded": [
            rec(RERUN_AT, "checkpoint_loaded", 0, step=20),
            rec(RERUN_AT + 0.25, "checkpoint_loaded", 1, step=20),
        ],
        "first_step": [rec(RERUN_AT + 1.5, "step", 0, step=21)],
        "end": finished(FAULT + 20.0, range(4), restart=0),
    }
    parts.update(change)
    extra = {
        "forensics": FOUND,
        "prometheus_saw_it_at": FAULT + 1.5,
        "watchdog_codes": codes or {"node0": 137, "node1": 137},
        "ended_after_s": ended_after,
        "restarted_at": RERUN_AT,
    }
    return seen_of("hang-rank", WATCHED, [FREEZE], [r for rs in parts.values() for r in rs], extra=extra)


def test_the_watchdog_reports_when_the_agents_ended_and_the_rerun_from_its_own_start():
    report = judged(watched())
    assert report.facts["watchdog_s"] == 3 and report.facts["seconds_until_the_agents_ended"] == 4.02
    assert report.facts["restarts"] == 0 and report.facts["recovery"] == {"total": 6.5}
    assert report.checks[1:4] == [
        Check(
            f"the 3 s step watchdog ended the hang before the {TIMEOUT} s timeout",
            True,
            "every agent SIGKILLed by its own timer server 4.0 s after the freeze: "
            "exit codes {'node0': 137, 'node1': 137}",
        ),
        Check("the rerun resumed from a checkpoint", True, "loaded [20]"),  # rank 0's, at the rerun's first instant
        Check("the job succeeded", True, "exit codes {'node0': 0, 'node1': 0}"),
    ]
    assert report.explanation.startswith("every rank's 3 s step deadline passed")


@pytest.mark.parametrize(
    ("ended_after", "codes", "ok"),
    [
        (TIMEOUT - 0.25, None, True),
        (TIMEOUT, None, False),  # as late as the timeout: the timeout could have ended it
        (4.0, {"node0": 137, "node1": 1}, False),  # an agent that did not die of SIGKILL
    ],
)
def test_the_watchdog_must_end_every_agent_by_sigkill_before_the_timeout(ended_after, codes, ok):
    assert judged(watched(ended_after, codes)).checks[1].ok is ok


def test_a_rerun_that_loaded_nothing_on_rank_0_or_never_stepped_is_said_so():
    others = judged(watched(loaded=[rec(RERUN_AT, "checkpoint_loaded", 1, step=20)]))
    assert others.checks[2] == Check("the rerun resumed from a checkpoint", False, "loaded []")
    stalled = judged(watched(first_step=[], end=[]))
    assert stalled.facts["recovery"] == {"total": None}
