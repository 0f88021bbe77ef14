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


def test_a_survivor_its_keeper_recorded_as_stranded_by_gloo_may_be_replaced_too_and_is_named():
    """lab.inprocess.lookout: a rank gloo stranded in a collective leaves, and a spare takes its
    place as well. The verdict names it; a survivor restarted without that record still fails."""
    evidence = seen(CASE)
    start = copy.deepcopy(recorded_after(evidence, "kill_worker", "start")[0])
    evidence.events.append({**start, "rank": 3, "local_rank": 1, "node": "node1"})
    fault = evidence.injected("kill_worker")["time"]
    record = {"name": "lab.rank_stranded", "metadata": {"rank": 3}}
    evidence.agents.append({"time": fault + 0.5, "node": "node1", "name": record["name"], "event": record})
    report = judge(CASE, evidence)
    assert failed(report) == [] and report.facts["stranded"] == [3]
    assert any("stranded by gloo, rank(s) [3]" in check.name for check in report.checks), report.checks

    evidence.agents[-1]["event"]["metadata"]["rank"] = 2  # a record of another rank excuses nothing
    assert failed(judge(CASE, evidence)) == [SPARE + " (and, stranded by gloo, rank(s) [2]: lab.inprocess.lookout)"]
