"""Every split drill's judge on what real runs saw (tests/unit/drill_cases.py): the recorded run
passes, and the same evidence with one thing gone wrong fails the check that should catch it,
and only by that check's name. Here the drills a group restarts from; the ones that hang,
slow, stop or loop are in test_judges_stalls.py. No process runs."""

from __future__ import annotations

import json

import pytest
from drill_cases import CASES, failed, judge, recorded_after, seen

from lab import exercises
from lab.exercises import hang_rank
from lab.exercises.seen import Seen

# What each recorded run shows, beside its verdict (these moved here from system tests).
FACTS = {
    "kill-worker": lambda f: f["restarts"] == 1 and 0 <= f["lost_steps"] <= 10 and f["recovery"]["total"] > 0,
    "kill-worker-torch-defaults": lambda f: f["final_weights_match_reference"] is False,
    "kill-worker-in-process": lambda f: f["replacements"] == 1 and f["lost_steps"] <= 1 and f["recovery"]["total"] > 0,
    # Killed at step 25 (reached 26): step 20 written from a thread, committed by none; step 10 loaded.
    "kill-worker-save-async": lambda f: f["save_in_flight"] == 20 and f["lost_steps"] == 16 and f["restarts"] == 1,
    "rank-exception": lambda f: "RuntimeError" in f["error"] and f["restarts"] == 1 and 0 <= f["lost_steps"] <= 10,
    "kill-node": lambda f: f["world_size_after"] == [4] and f["final_weights_match_reference"],
    "kill-node-elastic": lambda f: f["world_size_after"] == [2],
    # Killed at step 25: on at 2 ranks from step 20, node1 back, all 4 again; each sample once in epoch 0.
    "kill-node-elastic-rejoin": lambda f: (
        f["world_size_after"] == [2, 4] and f["samples"]["epochs_judged_for_skips"] == [0]
    ),
    # 4 x 1, node3 killed at step 25: on at 3 ranks from step 20, 4 again from 55; epoch 0 ended
    # 24 samples short of a 32-sample step (drop_last after the resize), no sample skipped or repeated.
    "kill-node-elastic-rejoin-4x1": lambda f: (
        f["world_size_after"] == [3, 4] and f["samples"]["epochs_judged_for_skips"] == [0] and f["lost_steps"] <= 10
    ),
    "kill-node-in-process": lambda f: (
        f["fell_back"]["to"] == "restart" and f["fell_back"]["lost_steps"] <= 10 and f["final_weights_match_reference"]
    ),
    "kill-rendezvous-host": lambda f: f["lost_steps"] is None,
    "kill-rendezvous-host-etcd": lambda f: f["final_weights_match_reference"] and f["lost_steps"] <= 10,
    "hang-rank": lambda f: f["restarts"] == 1 and f["seconds_until_the_timeout_fired"] < 25,
    "hang-rank-watchdog": lambda f: f["seconds_until_the_agents_ended"] < 10 and f["final_weights_match_reference"],
    "hang-rank-in-process": lambda f: (
        f["seconds_until_the_keeper_ended_it"] < 10 and f["replacements"] == 1 and f["lost_steps"] <= 1
    ),
    "hang-rank-in-python": lambda f: (
        f["fell_back"]["to"] == "restart"
        and f["fell_back"]["lost_steps"] <= 10
        and f["recovery"]["detect"] >= hang_rank.PG_TIMEOUT_S * 0.9
    ),
    "hang-rank-in-python-restart": lambda f: f["restarts"] == 1 and f["seconds_until_prometheus_saw_it"] is None,
    "partition-node": lambda f: f["restarts"] >= 1 and f["forensics"]["finding"],
    "straggler": lambda f: max(f["busy_seconds_per_step"], key=f["busy_seconds_per_step"].get) == 1,
    "preempt": lambda f: f["lost_steps"] == 0 and f["final_weights_match_reference"],
    "corrupt-checkpoint": lambda f: f["restarts"] == 1 and f["final_weights_match_reference"],
    "collective-mismatch": lambda f: f["seconds_to_failure"] < 30,
    "crash-loop": lambda f: (
        f["restarts"] == 4 and f["crash_loop_restarts"] == 3 and f["crash_loop_stopped_after_s"] < 60
    ),
    # Told at step 25, rank 0 paused in step 30's save (its file half written, not yet renamed); 20 loaded.
    "kill-in-save": lambda f: (
        f["cut"]["step"] == 30 and ".step_00000030.ckpt." in f["cut"]["path"] and f["lost_steps"] == 10
    ),
    # Rank 1 paused with its shard of step 30 written, the step's folder not committed; 20 loaded.
    "kill-in-save-fsdp2": lambda f: f["cut"]["path"].endswith("/.dcp_00000030.tmp") and f["lost_steps"] == 10,
}


def test_every_drill_of_the_catalogue_is_judged_here():
    assert {drill.NAME for drill, _ in CASES.values()} == set(exercises.drills())


@pytest.mark.parametrize("case", CASES)
def test_the_recorded_run_passes_as_it_did_live(case):
    report = judge(case, seen(case))
    assert report.verdict == "pass", report.checks
    assert FACTS[case](report.facts), report.facts  # what is true of the run, written down by hand


def test_the_evidence_survives_its_json_unchanged():
    evidence = seen("kill-node-elastic")
    assert Seen.from_json(json.loads(json.dumps(evidence.to_json()))) == evidence
    assert evidence.topology.min_nodes == 1


def test_kill_worker_that_resumed_from_scratch_fails_on_the_checkpoint_and_the_lost_steps():
    evidence = seen("kill-worker")
    for e in recorded_after(evidence, "kill_worker", "checkpoint_loaded"):
        e["step"] = 0
    assert failed(judge("kill-worker", evidence)) == [
        "resumed from the newest checkpoint",
        "lost at most one checkpoint interval (10 steps)",
    ]


@pytest.mark.parametrize(
    ("loaded", "caught_by"),
    [
        (20, "the step in flight at the fault was not loaded"),  # step 20's save had begun, never committed
        (0, "lost at most two checkpoint intervals (20 steps)"),  # started over: 26 steps lost
    ],
)
def test_a_kill_during_an_async_save_that_resumed_wrongly_fails_the_check_that_names_it(loaded, caught_by):
    """The recorded kill during an async DCP save, with the resume moved: to the step in flight
    (a job that trusted a half-written step), or to nothing (a job that lost its checkpoints)."""
    evidence = seen("kill-worker-save-async")
    for e in recorded_after(evidence, "kill_worker", "checkpoint_loaded"):
        e["step"] = loaded
    assert failed(judge("kill-worker-save-async", evidence)) == ["resumed from the newest checkpoint", caught_by]


def test_a_job_that_never_grew_back_fails_on_its_world_sizes():
    """--elastic --rejoin where the node's return changed nothing: the job ended at 2 ranks."""
    evidence = seen("kill-node-elastic-rejoin")
    for e in evidence.events:
        if (
            e["event"] == "rendezvous_done"
            and e["world_size"] == 4
            and e["time"] > evidence.injected("kill_node")["time"]
        ):
            e["world_size"] = 2
    assert failed(judge("kill-node-elastic-rejoin", evidence)) == [
        "it shrank to 2 ranks, then grew back to 4 when the node rejoined"
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


def test_torch_defaults_counts_a_node_still_waiting_as_not_failed():
    """The drill stops waiting once a node failed (the other may sit in gloo's connect for a
    minute); a node still running, or one that ended well, is no failure of the job."""
    evidence = seen("kill-worker-torch-defaults")
    evidence.codes = {"node0": None, "node1": 1}
    assert failed(judge("kill-worker-torch-defaults", evidence)) == []
    evidence.codes = {"node0": None, "node1": 0}
    assert failed(judge("kill-worker-torch-defaults", evidence)) == ["with torch's defaults the job fails"]


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


def test_a_damaged_checkpoint_nobody_noticed_fails():
    evidence = seen("corrupt-checkpoint")
    evidence.events = [e for e in evidence.events if e["event"] != "checkpoint_invalid"]
    assert failed(judge("corrupt-checkpoint", evidence)) == ["the damaged checkpoint was detected"]
