"""The judges of the drills that hang, slow, stop or loop, on what real runs saw with one thing
gone wrong (tests/unit/drill_cases.py; the restart drills: test_judges.py). No process runs."""

from __future__ import annotations

import copy

from drill_cases import after_fault, failed, judge, recorded_after, seen

from lab.exercises import collective_mismatch, hang_rank, preempt, straggler
from lab.exercises.seen import Seen
from lab.health.events import AgentEvent


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


def test_an_in_process_hang_that_no_keeper_ended_fails_on_that_check_alone():
    """The survivors may still regroup (say, the peers' timeout ended it): without the keeper's
    own record of ending the frozen rank, the drill's claim is not shown."""
    evidence = copy.deepcopy(seen("hang-rank-in-process"))
    evidence.agents = [a for a in evidence.agents if a["name"] != AgentEvent.RANK_FROZEN]
    assert failed(judge("hang-rank-in-process", evidence)) == [
        "its keeper heard no heartbeat for 3.3 s and SIGKILLed the frozen rank, before its peers' 10 s timeout"
    ]


def test_an_in_process_hang_ended_on_the_wrong_rank_or_too_late_fails():
    for rank, late in ((0, 0.0), (1, hang_rank.PG_TIMEOUT_S)):
        evidence = copy.deepcopy(seen("hang-rank-in-process"))
        frozen = next(a for a in evidence.agents if a["name"] == AgentEvent.RANK_FROZEN)
        frozen["event"]["metadata"]["rank"] = rank
        frozen["time"] += late
        assert "SIGKILLed the frozen rank" in failed(judge("hang-rank-in-process", evidence))[0]


FELL_BACK = "every node's keeper fell back to one restart of the whole group"


def test_a_python_hang_a_keeper_took_for_frozen_fails_the_timeout_check_alone():
    """A rank that hangs in Python still beats: a keeper that ended it as frozen would mean the
    drill hung it some other way, and the fallback it claims was not shown."""
    evidence = copy.deepcopy(seen("hang-rank-in-python"))
    fault_time = after_fault(evidence, "kill_worker")
    evidence.agents.append(
        {"name": AgentEvent.RANK_FROZEN, "time": fault_time + 3.4, "node": "node0", "event": {"metadata": {"rank": 1}}}
    )
    assert failed(judge("hang-rank-in-python", evidence)) == [
        "no keeper took rank 1 for frozen (it still beat); its peers' collectives timed out at the 10 s "
        "process-group timeout"
    ]


def test_a_fallback_on_one_node_only_or_a_rank_that_took_a_peers_state_fails():
    evidence = copy.deepcopy(seen("hang-rank-in-python"))
    evidence.agents = [a for a in evidence.agents if a["node"] != "node1" or a["name"] != AgentEvent.GROUP_RESTARTED]
    assert failed(judge("hang-rank-in-python", evidence)) == [FELL_BACK]
    evidence = copy.deepcopy(seen("hang-rank-in-python"))
    loaded = recorded_after(evidence, "kill_worker", "checkpoint_loaded")
    evidence.events.remove(next(e for e in loaded if e["rank"] == 3))  # rank 3 came back some other way
    assert failed(judge("hang-rank-in-python", evidence)) == [
        "every rank started afresh and resumed from the same checkpoint"
    ]


def test_a_node_loss_no_keeper_heard_or_restarted_on_one_node_only_fails_in_process():
    evidence = copy.deepcopy(seen("kill-node-in-process"))
    evidence.agents = [a for a in evidence.agents if a["name"] != AgentEvent.KEEPER_LOST]
    assert failed(judge("kill-node-in-process", evidence)) == [
        "the other keepers heard node1's keeper fall silent and stopped their ranks to wait for it"
    ]
    evidence = copy.deepcopy(seen("kill-node-in-process"))
    evidence.agents = [a for a in evidence.agents if a["node"] != "node0" or a["name"] != AgentEvent.GROUP_RESTARTED]
    assert failed(judge("kill-node-in-process", evidence)) == [FELL_BACK]


def test_a_python_hang_under_a_restart_is_judged_without_prometheus_seeing_it_down():
    """Its exporter's thread still answers: the restart's verdict has no Prometheus check then."""
    report = judge("hang-rank-in-python-restart", seen("hang-rank-in-python-restart"))
    assert report.verdict == "pass" and not any("Prometheus" in c.name for c in report.checks)


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


def steps_shifted(evidence: Seen, ranks: set[int], factor: float) -> Seen:
    """The evidence with the given ranks' steps after the fault renumbered to run `factor`
    times as fast as they were recorded (as if those ranks had not waited)."""
    evidence = copy.deepcopy(evidence)
    at = after_fault(evidence, "slow_worker")
    for rank in ranks:
        steps = [e for e in evidence.events if e["event"] == "step" and e["rank"] == rank and e["time"] > at]
        first = steps[0]["step"]
        for e in steps:
            e["step"] = first + round((e["step"] - first) * factor)
    return evidence


def test_a_straggler_whose_peers_kept_their_pace_or_that_never_slowed_fails_the_lockstep_check():
    """Peers that ran on at their own rate while the slowed rank fell behind did not wait for it;
    a slowed rank that kept its rate was not slowed. The alert checks hold either way."""
    recorded = seen("straggler")
    assert failed(judge("straggler", recorded)) == []
    for changed in (steps_shifted(recorded, {0, 2, 3}, 1.6), steps_shifted(recorded, {0, 1, 2, 3}, 1.6)):
        assert failed(judge("straggler", changed)) == ["every rank slowed down together"]


def test_lockstep_allows_a_step_apart_at_each_end_of_the_window():
    """The CI run that failed under load: 4.8 steps/s before, 2.8 and 3.0 after over 5 s."""
    before = {rank: 4.8 for rank in range(4)}
    assert straggler.slowed_together(before, {0: 2.8, 1: 3.0, 2: 2.8, 3: 2.8}, 1, 4, 5.0)
    assert not straggler.slowed_together(before, {0: 2.8, 1: 3.0, 2: 2.8}, 1, 4, 5.0)
    assert not straggler.slowed_together(before, {0: 2.8, 1: 3.8, 2: 2.8, 3: 2.8}, 1, 4, 5.0)
    assert not straggler.slowed_together(before, {0: 4.0, 1: 4.0, 2: 4.0, 3: 4.0}, 1, 4, 5.0)


def test_a_rank_that_died_instead_of_stopping_fails_the_preemption():
    evidence = seen("preempt")
    exit_before = next(e for e in evidence.events if e["event"] == "exit" and e.get("reason") == "preempted")
    exit_before["reason"] = "error"
    evidence.extra["gone_after_s"] = preempt.GRACE_S + 1
    assert failed(judge("preempt", evidence)) == [
        f"{evidence.extra['preempted']} was gone within the 10 s grace period",
        "every rank stopped as preempted, at the same step",
    ]


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
