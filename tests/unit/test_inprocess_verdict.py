"""kill-worker under --recovery in-process, judged on a recorded run (tests/fixtures/drills/
kill-worker-in-process): each way the recovery can go wrong fails its own check, and only it.
No process runs."""

from __future__ import annotations

import copy

from drill_cases import failed, judge, recorded_after, seen

from lab.exercises import inprocess_verdict

CASE = "kill-worker-in-process"
SPARE = "rank 1's place went to a warm spare, the other ranks stayed"
FROM_A_PEER = "every rank took its state from a surviving peer, no checkpoint read"
LOST = "lost at most the step in flight"


def test_the_recorded_recovery_is_broken_down_by_stage():
    evidence = seen(CASE)
    stages = inprocess_verdict.breakdown(evidence.events, evidence.injected("kill_worker")["time"])
    parts = [stages[s] for s in ("detect", "regroup", "state_from_peer", "first_step")]
    assert all(p is not None and p >= 0 for p in parts) and abs(sum(parts) - stages["total"]) < 1e-6


def test_a_survivor_that_was_restarted_too_fails_only_the_spare_check():
    evidence = seen(CASE)
    start = copy.deepcopy(recorded_after(evidence, "kill_worker", "start")[0])
    evidence.events.append({**start, "rank": 3, "local_rank": 1, "node": "node1"})
    assert failed(judge(CASE, evidence)) == [SPARE]


def test_state_from_the_killed_rank_or_a_checkpoint_fails_only_the_handover_check():
    evidence = seen(CASE)
    for handed in recorded_after(evidence, "kill_worker", "state_from_peer"):
        handed["source"] = 1
    assert failed(judge(CASE, evidence)) == [FROM_A_PEER]

    evidence = seen(CASE)
    handed = recorded_after(evidence, "kill_worker", "state_from_peer")[0]
    evidence.events.append({**handed, "event": "checkpoint_loaded", "path": "ckpt/step_20.pt"})
    assert failed(judge(CASE, evidence)) == [FROM_A_PEER]


def test_an_older_state_handed_over_fails_only_on_the_steps_lost():
    evidence = seen(CASE)
    for handed in recorded_after(evidence, "kill_worker", "state_from_peer"):
        handed["step"] -= 5
    report = judge(CASE, evidence)
    assert failed(report) == [LOST] and report.facts["lost_steps"] >= 5


def test_a_job_that_never_handed_state_over_fails_without_a_traceback():
    evidence = seen(CASE)
    evidence.events[:] = [e for e in evidence.events if e["event"] != "state_from_peer"]
    assert failed(judge(CASE, evidence)) == [FROM_A_PEER, LOST]
