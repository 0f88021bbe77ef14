"""What the drills' shared verdict code reads off a run (lab.exercises.observe, inprocess_verdict),
on events written by hand: the checkpoints before a restart and the one loaded after, the
in-process recovery's stages, the steps a handover redid, the ranks gloo stranded, and the
fallback to a restart. Times are binary fractions, so each span is exact. Written where mutation
testing showed edges no recorded run reached (docs/mutation.md). No process runs."""

from __future__ import annotations

from drill_runs import FAULT, agent, rec

from lab.exercises import inprocess_verdict, observe
from lab.exercises.seen import Seen
from lab.health.events import AgentEvent
from lab.report import Check, Report
from lab.topology import Topology


def restarted_run(loaded_step: int = 20, reached: int = 25) -> list[dict]:
    """Saves at steps 10 and 20 before the fault at 10 s, steps up to `reached`, the group back at
    11 s (a save at that very moment belongs to the new group), rank 0 loading `loaded_step`."""
    return [
        rec(2.0, "checkpoint_saved", step=10),
        rec(4.0, "checkpoint_saved", step=20),
        rec(9.0, "step", step=reached),
        rec(FAULT, "checkpoint_loaded", step=99),  # at the fault itself: not after it
        rec(11.0, "start", restart=1),
        rec(11.0, "checkpoint_saved", step=30, restart=1),
        rec(11.5, "checkpoint_loaded", 1, 1, step=10),
        rec(12.0, "checkpoint_loaded", 0, 1, step=loaded_step),
    ]


def test_the_checkpoints_before_the_restart_and_rank_0s_load_after_the_fault():
    assert observe.checkpoint_progress(restarted_run(), FAULT) == ([10, 20], 25, [20])
    assert observe.checkpoint_progress([rec(11.0, "start", restart=1)], FAULT) == ([], 0, [])
    assert observe.restarts([]) == 0 and observe.restarts(restarted_run()) == 1
    assert observe.first_time(restarted_run(), 4.0, lambda e: e["event"] == "checkpoint_saved") == 4.0


def restart_checks(events: list[dict], ckpt_every: int = 10) -> list[Check]:
    evidence = _seen(events, {"node0": 0, "node1": 0})
    report = Report("kill-worker", "local", 4)
    observe.judge_restart_resume(report, evidence, FAULT, ckpt_every)
    return report.checks


def _seen(events: list[dict], codes: dict) -> Seen:
    return Seen("drill", "local", Topology(nodes=2, nproc_per_node=1), codes=codes, events=events)


def test_a_restart_is_judged_on_the_newest_checkpoint_and_the_steps_lost():
    checks = restart_checks(restarted_run(20, 25))
    assert checks[:4] == [
        Check("the job succeeded", True, "exit codes {'node0': 0, 'node1': 0}"),
        Check("the worker group restarted once", True, "restart count 1"),
        Check("resumed from the newest checkpoint", True, "newest before the fault: 20, loaded: [20]"),
        Check("lost at most one checkpoint interval (10 steps)", True, "lost 5 steps"),
    ]
    assert restart_checks(restarted_run(20, 20))[3].ok  # nothing lost
    assert restart_checks(restarted_run(20, 30))[3].ok  # exactly one interval
    assert not restart_checks(restarted_run(20, 31))[3].ok
    assert not restart_checks(restarted_run(20, 19))[3].ok  # a load from the future is no resume
    assert restart_checks(restarted_run(10, 25))[2] == Check(
        "resumed from the newest checkpoint", False, "newest before the fault: 20, loaded: [10]"
    )
    nothing = restart_checks([rec(11.0, "start", restart=1)])
    assert nothing[2] == Check("resumed from the newest checkpoint", False, "newest before the fault: None, loaded: []")
    assert nothing[3] == Check("lost at most one checkpoint interval (10 steps)", False, "lost None steps")


def test_the_final_weights_match_only_as_one_checksum_equal_to_the_reference():
    report = Report("drill", "local", 2)
    assert not observe.check_final_weights(report, {"a", "b"}, {"a", "b"}, "ran")  # ranks that disagree
    assert observe.check_final_weights(report, {"a"}, {"a"}, "cached")
    assert report.facts == {"final_weights_match_reference": True, "reference": "cached"}
    assert report.checks[0].detail == "['a', 'b'] vs ['a', 'b']"


def in_process_run() -> list[dict]:
    return [
        rec(9.0, "step", step=5),
        rec(FAULT, "step", 1, step=6),  # at the fault itself: not before it
        rec(FAULT, "state_from_peer", 1, step=1, source=0),  # nor after it
        rec(10.125, "rendezvous_done", 3),  # before any collective failed: not the regroup
        rec(10.25, "collective_failed"),
        rec(10.5, "rendezvous_done", 1),
        rec(10.75, "state_from_peer", 1, 1, step=4, source=0),
        rec(11.0, "step", step=5),
    ]


def test_an_in_process_recovery_is_timed_stage_by_stage_and_counts_the_steps_redone():
    assert inprocess_verdict.breakdown(in_process_run(), FAULT) == {
        "detect": 0.25,
        "regroup": 0.25,
        "state_from_peer": 0.25,
        "first_step": 0.25,
        "total": 1.0,
    }
    assert inprocess_verdict.steps_redone(in_process_run(), FAULT) == 1  # step 5 reached, state of step 4
    assert inprocess_verdict.steps_redone([rec(10.75, "state_from_peer", step=4)], FAULT) == 0  # no step before
    assert inprocess_verdict.steps_redone([rec(10.75, "state_from_peer", step=0)], FAULT) == 0
    ahead = [rec(9.0, "step", step=3), rec(10.75, "state_from_peer", step=4)]
    assert inprocess_verdict.steps_redone(ahead, FAULT) == 0
    assert inprocess_verdict.steps_redone(in_process_run()[:3], FAULT) is None


def test_stranded_ranks_are_those_their_keepers_recorded_after_the_fault():
    agents = [
        agent(9.0, AgentEvent.RANK_STRANDED, rank=1),
        agent(FAULT, AgentEvent.RANK_STRANDED, rank=4),
        agent(10.5, AgentEvent.RANK_STRANDED, rank=2),
        agent(10.6, AgentEvent.RANK_FROZEN, rank=3),
        {"time": 10.7, "node": "node1", "name": AgentEvent.RANK_STRANDED, "message": "", "event": {}},
    ]
    assert inprocess_verdict.stranded_ranks(agents, FAULT) == {2}


def test_a_fallback_to_a_restart_says_why_where_when_and_what_it_redid():
    why = "rank 0's collective timed out: a peer hangs, alive but not in it"
    agents = [
        agent(FAULT, AgentEvent.GROUP_RESTARTED, "node9", round=9, why="at the fault: not after it"),
        agent(12.0, AgentEvent.GROUP_RESTARTED, "node0", round=1, why=why),
        agent(12.25, AgentEvent.GROUP_RESTARTED, "node1", round=1, why=why),
    ]
    events = [rec(9.0, "step", step=25), rec(FAULT, "step", step=26)]
    events += [rec(11.0, "rendezvous_done"), rec(11.5, "step", 1, step=26)]  # before the round: not it
    events += [rec(12.5, "rendezvous_done", r, 1) for r in (0, 1)]
    events += [rec(13.0, "checkpoint_loaded", r, 1, step=20) for r in (0, 1)] + [rec(13.5, "step", 0, 1, step=21)]
    evidence = _seen(events, {"node0": 0, "node1": 0})
    evidence.agents = agents
    fell = inprocess_verdict.fallback_facts(evidence, FAULT)
    assert fell == {
        "to": "restart",
        "why": why,
        "nodes": ["node0", "node1"],
        "rounds": [1],
        "resumed_from": [20],
        "loaded_by": [0, 1],
        "lost_steps": 5,
        "seconds": {"detect": 2.0, "restart": 0.5, "first_step": 1.0, "total": 3.5},
    }
    assert (inprocess_verdict.steps_text(fell), inprocess_verdict.cost_text(fell)) == ("20", "3.5 s")
    none = {"resumed_from": [], "seconds": {"total": None}}
    assert (inprocess_verdict.steps_text(none), inprocess_verdict.cost_text(none)) == ("(none)", "an unknown time")
    evidence.agents = []
    assert inprocess_verdict.fallback_facts(evidence, FAULT)["why"] is None
    evidence.agents = [{**agents[1], "event": {}}]  # a record with no metadata: nothing said, nothing raised
    assert (inprocess_verdict.fallback_facts(evidence, FAULT)["why"], fell["rounds"]) == (None, [1])
    evidence.events = [e for e in events if e["event"] != "checkpoint_loaded"]
    assert inprocess_verdict.fallback_facts(evidence, FAULT)["lost_steps"] is None
    evidence.events = [rec(12.5, "rendezvous_done"), rec(13.0, "checkpoint_loaded", step=0)]  # no step before
    assert inprocess_verdict.fallback_facts(evidence, FAULT)["lost_steps"] == 0
    assert inprocess_verdict.steps_text({"resumed_from": [10, 20]}) == "10, 20"


IN_FLIGHT = "the step in flight at the fault was not loaded"
CAREFUL = "a careful job commits a step only once every rank's files are whole"


def in_flight(saved: list[int], reached: int, loaded: list[int]) -> Report:
    report = Report("kill-worker", "local", 4)
    observe.check_in_flight(report, saved, reached, loaded, 10)
    return report


def test_the_save_in_flight_is_the_newest_begun_and_must_not_be_the_one_loaded():
    good = in_flight([10], 25, [10])  # step 20's save had begun at step 25 and was not committed
    assert good.facts["save_in_flight"] == 20 and good.explanation == ""
    assert good.checks == [
        Check(IN_FLIGHT, True, "step 20's save had begun (not committed before the fault); loaded: [10]")
    ]
    committed = in_flight([10, 20], 25, [10, 20])  # committed before the fault: not in flight
    assert committed.checks == [
        Check(IN_FLIGHT, False, "step 20's save had begun (committed before the fault); loaded: [10]")
    ]
    assert committed.explanation.startswith(CAREFUL)
    loaded_it = in_flight([10], 25, [20])
    assert not loaded_it.checks[0].ok and loaded_it.explanation.startswith(CAREFUL)


def test_before_the_first_save_began_nothing_was_in_flight():
    first = in_flight([], 9, [0])  # the fault before step 10: no save had begun
    assert first.facts["save_in_flight"] == 0 and not first.checks[0].ok
    assert in_flight([], 10, [0]).checks[0].ok  # at step 10 the first save had begun, uncommitted
    assert not in_flight([10], 25, []).checks[0].ok  # nothing loaded: no resume to judge


def test_the_reference_the_weights_were_compared_with_is_said():
    evidence = Seen(
        "drill", "local", Topology(nodes=2, nproc_per_node=1), events=[], reference=["c"], reference_source="cached"
    )
    report = Report("drill", "local", 2)
    observe.judge_reference(report, evidence)
    assert report.facts["reference"] == "cached"


def test_only_rank_0s_first_load_after_the_fault_is_shown():
    twice = restart_checks([*restarted_run(20, 25), rec(13.0, "checkpoint_loaded", 0, 2, step=10)])  # a second restart
    assert twice[2] == Check("resumed from the newest checkpoint", True, "newest before the fault: 20, loaded: [20]")
    again = in_flight([10], 25, [10, 0])
    assert again.checks[0].detail == "step 20's save had begun (not committed before the fault); loaded: [10]"
