"""kill-node's and preempt's judges on runs written by hand (tests/unit/drill_runs.py): the
steps lost, the world sizes after the kill, the resume at the edges of the fault's instant, and
in-process the keepers that heard the lost node. The recorded runs left these unread
(docs/mutation.md). No process runs."""

from __future__ import annotations

from drill_runs import FAULT, agent, finished, rec, seen_of

from lab.exercises import DrillOptions, kill_node, preempt
from lab.health.events import AgentEvent
from lab.report import Check
from lab.topology import Topology

KILL = {"fault": "kill_node", "node": "node1", "time": FAULT, "args": {}, "result": None, "rank": 2}
FIXED = Topology(nodes=2, nproc_per_node=2, rdzv_backend="lab")
RESUMED = "resumed from the newest checkpoint"


def node_run(saved=(10, 20), loads=(20,), worlds=(4,), topology=FIXED, extra=None):
    """node1 killed at 10 s, back and regrouped 11 s later; rank 0 loads `loads`."""
    events = [rec(1.0 + i, "checkpoint_saved", step=s) for i, s in enumerate(saved)]
    events += [rec(9.0, "step", step=25), rec(FAULT, "rendezvous_done", 0, world_size=2)]  # at the kill: before it
    events += [rec(FAULT + 11.0 + i, "rendezvous_done", 0, i + 1, world_size=w) for i, w in enumerate(worlds)]
    events += [rec(FAULT + 11.25, "checkpoint_loaded", 0, i + 1, step=s) for i, s in enumerate(loads)]
    events += [rec(FAULT + 12.0, "step", 0, 1, step=21), *finished(FAULT + 20.0, range(4))]
    return seen_of("kill-node", topology, [KILL], events, extra=extra or {"survivor": "node0"})


def judged(seen, **own):
    return kill_node.judge(seen, DrillOptions(target_rank=2, at_step=25, own=own))


def test_a_node_killed_and_back_resumes_from_the_newest_checkpoint_with_every_rank():
    report = judged(node_run())
    assert report.facts["lost_steps"] == 5 and report.facts["world_size_after"] == [4]
    assert report.facts["recovery"]["total"] == 12.0
    assert report.checks[:3] == [
        Check(RESUMED, True, "newest before the kill 20, loaded [20]"),
        Check("the job succeeded once the node was back", True, "exit codes {'node0': 0, 'node1': 0}"),
        Check("the restarted group had all 4 ranks again", True, "world size after: [4]"),
    ]


def test_an_older_load_a_second_one_or_none_are_each_judged_on_the_first():
    assert judged(node_run(loads=(10,))).checks[0] == Check(RESUMED, False, "newest before the kill 20, loaded [10]")
    assert judged(node_run(loads=(20, 10))).checks[0] == Check(RESUMED, True, "newest before the kill 20, loaded [20]")
    nothing = judged(node_run(saved=(), loads=()))
    assert nothing.checks[0] == Check(RESUMED, False, "newest before the kill None, loaded []")
    assert nothing.facts["lost_steps"] is None


def test_an_elastic_job_goes_on_with_fewer_ranks_and_its_samples_are_judged():
    elastic = Topology(nodes=2, nproc_per_node=2, min_nodes=1)
    run = node_run(worlds=(2,), topology=elastic)
    run.events += [rec(FAULT + 12.5, "step", r, 1, step=22, epoch=0, samples=[r]) for r in range(2)]
    report = judged(run)
    assert report.checks[1:3] == [
        Check("the survivor finished the job", True, "exit codes {'node0': 0, 'node1': 0}"),
        Check("the job carried on with fewer ranks", True, "world size after the kill: [2]"),
    ]
    # Samples 0 and 1 once each in epoch 0, which never ended: nothing repeated, no skip judged.
    assert report.checks[3] == Check("every sample once per epoch", True, "0 repeated, 0 skipped over 1 epoch(s)")


KEEPER_CHECK = "the other keepers heard node1's keeper fall silent and stopped their ranks to wait for it"


def lost(t: float, keeper: str, silent: int) -> dict:
    """A keeper's record that it no longer hears node `silent`'s keeper."""
    return {
        "time": t,
        "node": keeper,
        "name": AgentEvent.KEEPER_LOST,
        "message": "",
        "event": {"metadata": {"node": silent}},
    }


def in_process_run(heard: list[dict]):
    """In-process: node1 lost whole at 10 s; both keepers restart every rank from step 20."""
    asked = [
        agent(FAULT + 12.0, AgentEvent.GROUP_RESTARTED, n, round=1, why="node1 came back") for n in ("node0", "node1")
    ]
    events = [rec(9.0, "step", step=25), rec(FAULT + 12.25, "rendezvous_done", 0, 1)]
    events += [rec(FAULT + 12.5, "checkpoint_loaded", r, 1, step=20) for r in range(4)]
    events += [rec(FAULT + 13.0, "step", 0, 1, step=21), *finished(FAULT + 20.0, range(4))]
    topology = Topology(nodes=2, nproc_per_node=2, in_process=True)
    return seen_of("kill-node", topology, [KILL], events, agents=heard + asked)


def test_in_process_the_keepers_that_heard_the_lost_node_are_named_with_when():
    heard = [
        lost(FAULT, "node0", 1),  # at the kill itself: not after it
        lost(FAULT + 3.375, "node0", 1),
    ]
    report = judged(in_process_run(heard))
    assert report.checks[0] == Check(KEEPER_CHECK, True, "heard by ['node0'], 3.4 s after the kill")
    assert "heard its silence after 3.4 s and stopped their ranks" in report.explanation
    assert (
        "from the checkpoint at step 20, redoing 5 steps, 13.0 s from the kill to the first step" in report.explanation
    )


def test_in_process_silence_heard_of_another_node_or_by_no_keeper_fails():
    other = judged(in_process_run([lost(FAULT + 3.5, "node1", 0)]))
    assert other.checks[0] == Check(KEEPER_CHECK, False, "no keeper heard it")
    wrong_keeper = [lost(FAULT + 3.5, "node1", 1)]  # the lost node cannot hear itself
    assert judged(in_process_run(wrong_keeper)).checks[0] == Check(
        KEEPER_CHECK, False, "heard by ['node1'], 3.5 s after the kill"
    )
    assert "heard its silence after 0.0 s" in judged(in_process_run([])).explanation


RERUN_AT = FAULT + 5.0


def preempted(exits=None, loads=((0, 25),), gone_after=2.5):
    """node1 preempted at 10 s; every rank stops at step 25 (saved); the rerun starts at 15 s,
    a load and a save recorded at that very instant; a load just before it belongs to the first run."""
    stops = exits if exits is not None else [rec(FAULT + 1.0, "exit", r, reason="preempted", step=25) for r in range(4)]
    events = [rec(FAULT + 0.5, "checkpoint_saved", step=25), *stops]
    events.append(rec(RERUN_AT - 0.25, "checkpoint_loaded", 0, step=10))
    events += [rec(RERUN_AT, "checkpoint_loaded", rank, step=step) for rank, step in loads]
    events.append(rec(RERUN_AT, "checkpoint_saved", step=30))  # the rerun's, at its first instant
    events += finished(FAULT + 20.0, range(4), restart=0)
    extra = {"preempted": "node1", "gone_after_s": gone_after, "restarted_at": RERUN_AT}
    fault = {"fault": "preempt", "node": "node1", "time": FAULT, "args": {"grace_s": 8}, "result": None, "rank": 2}
    return seen_of("preempt", FIXED, [fault], events, extra=extra)


def judged_preempt(seen):
    return preempt.judge(seen, DrillOptions(target_rank=2, at_step=25))


def test_a_preemption_is_checkpointed_at_the_stop_and_the_rerun_loses_no_step():
    report = judged_preempt(preempted())
    assert report.facts["restarts"] == 0 and report.facts["lost_steps"] == 0
    stops = [(r, "preempted", 25) for r in range(4)]
    assert report.checks[:5] == [
        Check(f"node1 was gone within the {preempt.GRACE_S:g} s grace period", True, "2.50 s"),
        Check("every rank stopped as preempted, at the same step", True, f"exits {stops}"),
        Check("the preemption step was checkpointed", True, "step 25, saved [25]"),
        Check("the rerun succeeded", True, "exit codes {'node0': 0, 'node1': 0}"),
        Check("the rerun resumed at the preemption step: no step lost", True, "stopped at 25, resumed from [25]"),
    ]


def test_a_rerun_judged_on_rank_0s_first_load_and_a_stop_that_was_no_preemption():
    others = judged_preempt(preempted(loads=((1, 25),)))
    assert others.facts["lost_steps"] is None and not others.checks[4].ok
    twice = judged_preempt(preempted(loads=((0, 25), (0, 20))))
    assert twice.checks[4] == Check(
        "the rerun resumed at the preemption step: no step lost", True, "stopped at 25, resumed from [25]"
    )
    died = [rec(FAULT + 1.0, "exit", r, reason="error", step=25) for r in range(4)]
    report = judged_preempt(preempted(exits=died))
    assert report.checks[1].detail == f"exits {[(r, 'error', 25) for r in range(4)]}"
    assert report.facts["lost_steps"] is None and report.checks[2].detail == "step None, saved [25]"
