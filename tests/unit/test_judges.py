"""Every split drill's judge on what real runs saw (tests/fixtures/drills/, recorded by
scripts/record-fixtures.sh): the recorded run passes, and the same evidence with one thing
gone wrong fails the check that should catch it, and only by that check's name. No process runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from lab.exercises import DrillOptions, hang_rank, kill_node, kill_rendezvous_host, kill_worker
from lab.exercises.seen import Seen

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"
CASES = {
    "kill-worker": (kill_worker, {}),
    "kill-worker-torch-defaults": (kill_worker, {"torch_defaults": True}),
    "kill-node": (kill_node, {}),
    "kill-node-elastic": (kill_node, {}),
    "kill-rendezvous-host": (kill_rendezvous_host, {}),
    "kill-rendezvous-host-etcd": (kill_rendezvous_host, {}),
    "hang-rank": (hang_rank, {}),
    "hang-rank-watchdog": (hang_rank, {}),
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
    "kill-node": lambda f: f["world_size_after"] == [4] and f["final_weights_match_reference"],
    "kill-node-elastic": lambda f: f["world_size_after"] == [2],
    "kill-rendezvous-host": lambda f: f["lost_steps"] is None,
    "kill-rendezvous-host-etcd": lambda f: f["final_weights_match_reference"] and f["lost_steps"] <= 10,
    "hang-rank": lambda f: f["restarts"] == 1 and f["seconds_until_the_timeout_fired"] < 25,
    "hang-rank-watchdog": lambda f: f["seconds_until_the_agents_ended"] < 10 and f["final_weights_match_reference"],
}


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


def test_kill_worker_that_resumed_from_scratch_fails_on_the_checkpoint_and_the_lost_steps():
    evidence = seen("kill-worker")
    at = after_fault(evidence, "kill_worker")
    for e in evidence.events:
        if e["event"] == "checkpoint_loaded" and e["time"] > at:
            e["step"] = 0
    assert failed(judge("kill-worker", evidence)) == [
        "resumed from the newest checkpoint",
        "lost at most one checkpoint interval (10 steps)",
    ]


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
    at = after_fault(evidence, "kill_node")
    for e in evidence.events:
        if e["event"] == "rendezvous_done" and e["time"] > at:
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
