"""Every split drill's judge on what real runs saw (tests/fixtures/drills/, recorded by
scripts/record-fixtures.sh): the recorded run passes, and the same evidence with one thing
gone wrong fails the check that should catch it, and only by that check's name. No process runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from lab import exercises
from lab.exercises import (
    DrillOptions,
    collective_mismatch,
    corrupt_checkpoint,
    crash_loop,
    hang_rank,
    kill_node,
    kill_rendezvous_host,
    kill_worker,
    partition_node,
    preempt,
    rank_exception,
    straggler,
)
from lab.exercises.seen import Seen

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"
CASES = {
    "kill-worker": (kill_worker, {}),
    "kill-worker-torch-defaults": (kill_worker, {"torch_defaults": True}),
    "rank-exception": (rank_exception, {}),
    "kill-node": (kill_node, {}),
    "kill-node-elastic": (kill_node, {}),
    "kill-rendezvous-host": (kill_rendezvous_host, {}),
    "kill-rendezvous-host-etcd": (kill_rendezvous_host, {}),
    "hang-rank": (hang_rank, {}),
    "hang-rank-watchdog": (hang_rank, {}),
    "partition-node": (partition_node, {}),
    "straggler": (straggler, {}),
    "preempt": (preempt, {}),
    "corrupt-checkpoint": (corrupt_checkpoint, {}),
    "collective-mismatch": (collective_mismatch, {}),
    "crash-loop": (crash_loop, {}),
}


def seen(case: str) -> Seen:
    return Seen.load(FIXTURES / case / "seen.json")


def judge(case: str, evidence: Seen):
    drill, flags = CASES[case]
    options = DrillOptions(target_rank=1, at_step=25, **flags)
    return drill.judge(evidence, options)


def failed(report) -> list[str]:
    return [c.name for c in report.checks if not c.ok]


# What each recorded run shows, beside its verdict (these moved here from system tests).
FACTS = {
    "kill-worker": lambda f: f["restarts"] == 1 and 0 <= f["lost_steps"] <= 10 and f["recovery"]["total"] > 0,
    "kill-worker-torch-defaults": lambda f: f["final_weights_match_reference"] is False,
    "rank-exception": lambda f: "RuntimeError" in f["error"] and f["restarts"] == 1 and 0 <= f["lost_steps"] <= 10,
    "kill-node": lambda f: f["world_size_after"] == [4] and f["final_weights_match_reference"],
    "kill-node-elastic": lambda f: f["world_size_after"] == [2],
    "kill-rendezvous-host": lambda f: f["lost_steps"] is None,
    "kill-rendezvous-host-etcd": lambda f: f["final_weights_match_reference"] and f["lost_steps"] <= 10,
    "hang-rank": lambda f: f["restarts"] == 1 and f["seconds_until_the_timeout_fired"] < 25,
    "hang-rank-watchdog": lambda f: f["seconds_until_the_agents_ended"] < 10 and f["final_weights_match_reference"],
    "partition-node": lambda f: f["restarts"] >= 1 and f["forensics"]["finding"],
    "straggler": lambda f: max(f["busy_seconds_per_step"], key=f["busy_seconds_per_step"].get) == 1,
    "preempt": lambda f: f["lost_steps"] == 0 and f["final_weights_match_reference"],
    "corrupt-checkpoint": lambda f: f["restarts"] == 1 and f["final_weights_match_reference"],
    "collective-mismatch": lambda f: f["seconds_to_failure"] < 30,
    "crash-loop": lambda f: (
        f["restarts"] == 4 and f["crash_loop_restarts"] == 3 and f["crash_loop_stopped_after_s"] < 60
    ),
}


def test_every_drill_of_the_catalogue_is_judged_here():
    assert {drill.NAME for drill, _ in CASES.values()} == set(exercises.drills())


@pytest.mark.parametrize("case", CASES)
def test_the_recorded_run_passes_as_it_did_live(case):
    recorded = json.loads((FIXTURES / case / "report.json").read_text())
    report = judge(case, seen(case))
    assert report.verdict == "pass", report.checks
    assert FACTS[case](report.facts), report.facts
    # The judge alone, on the evidence, draws the verdict the live drill printed, check for check.
    assert [c.name for c in report.checks] == [c["name"] for c in recorded["checks"]]


def test_the_evidence_survives_its_json_unchanged():
    evidence = seen("kill-node-elastic")
    assert Seen.from_json(json.loads(json.dumps(evidence.to_json()))) == evidence
    assert evidence.topology.min_nodes == 1


def after_fault(evidence: Seen, fault: str) -> float:
    return evidence.injected(fault)["time"]


def recorded_after(evidence: Seen, fault: str, event: str) -> list[dict]:
    """The records of that event after the fault: to change one thing in what the run saw."""
    at = after_fault(evidence, fault)
    return [e for e in evidence.events if e["event"] == event and e["time"] > at]


def test_kill_worker_that_resumed_from_scratch_fails_on_the_checkpoint_and_the_lost_steps():
    evidence = seen("kill-worker")
    for e in recorded_after(evidence, "kill_worker", "checkpoint_loaded"):
        e["step"] = 0
    assert failed(judge("kill-worker", evidence)) == [
        "resumed from the newest checkpoint",
        "lost at most one checkpoint interval (10 steps)",
    ]


def test_a_checkpoint_saved_between_the_injection_and_the_restart_is_the_newest():
    """On a loaded machine the kill's record can precede the save of the checkpoint the group
    then resumes from (CI, 2026-12-02: "newest before the fault: 20, loaded: [30]")."""
    evidence = seen("kill-worker")
    fault = evidence.injected("kill_worker")
    saves = [e["time"] for e in evidence.events if e["event"] == "checkpoint_saved" and e["time"] < fault["time"]]
    fault["time"] = max(saves) - 0.01  # the injection recorded just before the group's last save
    report = judge("kill-worker", evidence)
    assert report.verdict == "pass", failed(report)


def test_kill_worker_whose_ranks_disagree_fails_bit_identity():
    evidence = seen("kill-worker")
    exits = [e for e in evidence.events if e["event"] == "exit" and e.get("reason") == "completed"]
    exits[-1]["checksum"] = "0x1p+0"
    assert failed(judge("kill-worker", evidence)) == ["final weights bit-identical to an uninterrupted run"]


def test_kill_worker_that_failed_or_restarted_twice_says_so():
    evidence = seen("kill-worker")
    evidence.codes["node1"] = 1
    evidence.events.append({**evidence.events[-1], "event": "start", "restart": 2})
    assert failed(judge("kill-worker", evidence)) == ["the job succeeded", "the worker group restarted once"]


def test_a_rank_that_was_killed_rather_than_raising_fails_only_on_the_exception():
    """The same recovery with no error record from the rank (a SIGKILL leaves none) is a
    kill, not the exception this drill is about."""
    evidence = seen("rank-exception")
    evidence.events = [e for e in evidence.events if not (e["event"] == "exit" and e.get("reason") == "error")]
    assert failed(judge("rank-exception", evidence)) == ["rank 1 died of the exception, recorded"]


def test_a_different_error_on_the_rank_is_not_the_injected_exception():
    evidence = seen("rank-exception")
    for e in evidence.events:
        if e["event"] == "exit" and e.get("reason") == "error":
            e["error"] = "RuntimeError: Connection closed by peer"
    assert failed(judge("rank-exception", evidence)) == ["rank 1 died of the exception, recorded"]


def test_torch_defaults_without_the_upstream_failure_fails():
    evidence = seen("kill-worker-torch-defaults")
    evidence.logs = {node: log.replace("connectFullMesh", "connect") for node, log in evidence.logs.items()}
    step = next(e for e in evidence.events if e["event"] == "step")
    evidence.events.append({**step, "restart": 1})
    assert failed(judge("kill-worker-torch-defaults", evidence)) == [
        "the restarted workers failed in connectFullMesh",
        "no restarted group ever completed a step",
    ]


def test_kill_node_that_came_back_with_fewer_ranks_fails():
    evidence = seen("kill-node")
    for e in recorded_after(evidence, "kill_node", "rendezvous_done"):
        e["world_size"] = 2
    assert failed(judge("kill-node", evidence)) == ["the restarted group had all 4 ranks again"]


def test_an_elastic_job_whose_survivor_failed_fails():
    evidence = seen("kill-node-elastic")
    evidence.codes[evidence.extra["survivor"]] = 1
    assert failed(judge("kill-node-elastic", evidence)) == ["the survivor finished the job"]


def test_a_lost_store_host_without_a_store_error_is_not_explained():
    evidence = seen("kill-rendezvous-host")
    evidence.logs = {}
    assert failed(judge("kill-rendezvous-host", evidence)) == ["because it could not reach the rendezvous store"]


def test_etcd_survivor_that_did_not_wait_fails():
    evidence = seen("kill-rendezvous-host-etcd")
    evidence.extra["waiting"] = False
    assert failed(judge("kill-rendezvous-host-etcd", evidence)) == [
        "the survivor waited in the next round while node0 was down (10 s and more)"
    ]


def test_hang_rank_forensics_that_name_another_rank_fail():
    evidence = seen("hang-rank")
    evidence.extra["forensics"] = {**evidence.extra["forensics"], "suspects": [0]}
    assert failed(judge("hang-rank", evidence)) == [
        "forensics named the frozen rank, and the collective the others wait in"
    ]


def test_hang_rank_that_prometheus_saw_only_after_the_restart_fails():
    evidence = copy.deepcopy(seen("hang-rank"))
    evidence.extra["prometheus_saw_it_at"] = max(e["time"] for e in evidence.events) + 1
    assert failed(judge("hang-rank", evidence)) == ["Prometheus saw the frozen rank down before the group restarted"]


def test_a_watchdog_slower_than_the_timeout_fails():
    evidence = seen("hang-rank-watchdog")
    evidence.extra["ended_after_s"] = hang_rank.PG_TIMEOUT_S + 1
    assert failed(judge("hang-rank-watchdog", evidence)) == [
        f"the {evidence.topology.step_watchdog_s} s step watchdog ended the hang before the 10 s timeout"
    ]


def test_a_partition_whose_logs_show_no_timeout_and_that_never_finished_fails():
    evidence = seen("partition-node")
    evidence.logs = {node: log.replace("Timed out", "Gave up") for node, log in evidence.logs.items()}
    evidence.codes = {node: 1 for node in evidence.codes}
    assert failed(judge("partition-node", evidence)) == [
        "the logs say it was a timeout",
        "after the heal the job recovered and finished",
    ]


def test_a_straggler_alert_for_every_rank_names_no_one():
    evidence = seen("straggler")
    rank_one = evidence.extra["firing"][0]
    evidence.extra["firing"] = [{**rank_one, "labels": {**rank_one["labels"], "rank": str(r)}} for r in range(4)]
    evidence.extra["busy"] = {"0": 9.0, **{k: v for k, v in evidence.extra["busy"].items() if k != "0"}}
    assert failed(judge("straggler", evidence)) == [
        "LabStraggler fired for the slowed rank only",
        "the slowed rank is the busiest outside the all-reduce",
    ]


def test_a_rank_that_died_instead_of_stopping_fails_the_preemption():
    evidence = seen("preempt")
    exit_before = next(e for e in evidence.events if e["event"] == "exit" and e.get("reason") == "preempted")
    exit_before["reason"] = "error"
    evidence.extra["gone_after_s"] = preempt.GRACE_S + 1
    assert failed(judge("preempt", evidence)) == [
        f"{evidence.extra['preempted']} was gone within the 10 s grace period",
        "every rank stopped as preempted, at the same step",
    ]


def test_a_damaged_checkpoint_nobody_noticed_fails():
    evidence = seen("corrupt-checkpoint")
    evidence.events = [e for e in evidence.events if e["event"] != "checkpoint_invalid"]
    assert failed(judge("corrupt-checkpoint", evidence)) == ["the damaged checkpoint was detected"]


def test_a_mismatch_found_only_at_the_timeout_fails():
    evidence = seen("collective-mismatch")
    at = after_fault(evidence, "kill_worker")
    for e in recorded_after(evidence, "kill_worker", "exit"):
        if e.get("reason") == "error":
            e["time"] = at + collective_mismatch.PG_TIMEOUT_S
    evidence.logs = {}
    assert failed(judge("collective-mismatch", evidence)) == [
        "the error names the mismatch",
        "it failed fast, not at the 60 s timeout",
    ]


def test_crash_loop_judged_on_torchruns_count_fails_both_halves():
    """What torchrun's own count would have shown: the job stopped at the K+1-th survived fault,
    and the loop ended with torchrun's exit 1, unexplained."""
    evidence = seen("crash-loop")
    outlived = Seen.from_json(evidence.extra["outlived"])
    outlived.codes = {node: 1 for node in outlived.codes}
    evidence.extra["outlived"] = outlived.to_json()
    evidence.codes = {node: 1 for node in evidence.codes}
    evidence.logs = {node: log.replace("crash loop", "worker group failed") for node, log in evidence.logs.items()}
    assert failed(judge("crash-loop", evidence)) == [
        "with progress between them, 4 faults did not stop the job (budget 3)",
        "an agent exited 86 (crash loop)",
        "the agent said why",
    ]


def test_crash_loop_that_kept_restarting_or_stepped_fails_the_stop_check():
    evidence = seen("crash-loop")
    start = next(e for e in evidence.events if e["event"] == "start")
    evidence.events.append({**start, "restart": 4})
    assert failed(judge("crash-loop", evidence)) == ["killed at every start, the job stopped after 3 restarts"]
    evidence = seen("crash-loop")
    evidence.events.append({**start, "event": "step", "step": 1})
    assert failed(judge("crash-loop", evidence)) == ["killed at every start, the job stopped after 3 restarts"]
