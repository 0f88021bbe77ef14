"""`kill-node --elastic [--rejoin]` on a user's script (lab.exercises.script.resize, through the
script judge), on what three real runs saw: the tutorial script
(tests/user_scripts/snapshot_every_epoch.py) on 2 x 2 netns hosts, node1 killed at epoch 3 and left
dead (`--compare result.pt`), and the same with node1 started again once the survivors trained
without it; the third, the samples ledger across the resize, is described at its test (recorded
by scripts/record-fixtures.sh: script-kill-node-elastic, -rejoin, -samples). The truth, read from
the runs' events by hand: the first went on at world size 2 and node0 ended 0; the second formed
groups of 2, then 4, and both nodes ended 0; each resumed at epoch 4 from snapshot.pt. Then the
same evidence changed the way a failed run would differ. No process runs."""

from __future__ import annotations

import copy
from pathlib import Path

from lab.exercises.script import judge, resize, signals
from lab.exercises.seen import Seen

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"
SHRINK = "the job carried on with fewer ranks"  # as on the trainer (kill-node's judge)
REGROW = "it shrank to 2 ranks, then grew back to 4 when the node rejoined"


def seen(case: str) -> Seen:
    return Seen.load(FIXTURES / f"script-{case}" / "seen.json")


def checks(report) -> dict[str, bool]:
    return {c.name: c.ok for c in report.checks}


def test_a_node_lost_for_good_the_survivors_finish_at_two_ranks_and_the_dead_node_is_not_asked_to():
    evidence = seen("kill-node-elastic")
    assert evidence.codes["node1"] != 0  # the killed node never ended well: it is not what is judged
    report = judge.judge(evidence)
    assert report.verdict == "pass", report.checks
    assert checks(report)[SHRINK] and checks(report)["the job finished with exit 0"]
    assert report.facts["world_sizes_after"] == [2]
    assert report.facts["progress"]["reached"] == 3 and report.facts["progress"]["resumed_at"] == 4
    assert report.facts["loaded_after_fault"][0] == "snapshot.pt"
    assert "went on at 2 ranks" in report.facts["finding"]


def test_its_result_is_reported_not_judged_and_asks_for_no_second_reference():
    """A DDP job at another world size ends elsewhere by design: no check, no "differs" that would
    make a matrix run the fault-free reference again to ask whether the script is deterministic."""
    report = judge.judge(seen("kill-node-elastic"))
    assert judge.COMPARED not in checks(report)
    compared = report.facts["compared"]
    assert "differs" in compared and "not judged: the job trained on 2 ranks" in compared
    assert report.facts["result_differs"] is False and not judge.result_differs(report)


def test_a_survivor_that_failed_fails_the_drill():
    evidence = seen("kill-node-elastic")
    evidence.codes["node0"] = 1
    report = judge.judge(evidence)
    assert not checks(report)["the job finished with exit 0"] and report.verdict == "fail"


def test_a_job_that_never_shrank_fails_the_drill_with_the_sizes_it_formed():
    """The survivors waited for the lost node instead (a fixed-size rendezvous): every group of the
    run at world size 4. The check names what it saw."""
    evidence = seen("kill-node-elastic")
    for e in evidence.events:
        if e["event"] == "rendezvous_done":
            e["world_size"] = 4
    report = judge.judge(evidence)
    assert not checks(report)[SHRINK]
    assert next(c.detail for c in report.checks if c.name == SHRINK) == "world size after the kill: [4]"
    assert resize.not_comparable(evidence) == ""  # at its own size the result is judged as any other


def test_a_node_that_rejoined_grows_the_job_back_and_both_nodes_must_end_well():
    evidence = seen("kill-node-elastic-rejoin")
    report = judge.judge(evidence)
    assert report.verdict == "pass", report.checks
    assert checks(report)[REGROW] and report.facts["world_sizes_after"] == [2, 4]
    assert "went on at 2 then 4 ranks" in report.facts["finding"]
    failed = copy.deepcopy(evidence)
    failed.codes["node1"] = 1  # back, then failed: a rejoined node must end well too
    assert not checks(judge.judge(failed))["the job finished with exit 0"]


def test_a_rejoin_that_changed_nothing_fails():
    """The node came back but the job never grew: no group of 4 formed after the kill."""
    evidence = seen("kill-node-elastic-rejoin")
    killed = evidence.extra["fault"]["time"]
    evidence.events = [
        e for e in evidence.events if e["event"] != "rendezvous_done" or e["world_size"] != 4 or e["time"] < killed
    ]
    report = judge.judge(evidence)
    assert not checks(report)[REGROW]
    assert next(c.detail for c in report.checks if c.name == REGROW) == "world sizes after the kill, in turn: [2]"


def test_ranks_that_rejoin_later_are_not_ranks_that_resumed_apart():
    """Ranks 2 and 3 first print an epoch once the group grew back, later than ranks 0 and 1
    resumed: what each rank resumed at is read up to the group's change of size."""
    evidence = seen("kill-node-elastic-rejoin")
    source, unit = signals.step_source(evidence.events)
    resumed = signals.resumed_by_rank(evidence.events, evidence.extra["fault"]["time"], source, unit)
    assert set(resumed) == {0, 1} and len(set(resumed.values())) == 1
    assert "every rank resumed at the same step" not in checks(judge.judge(evidence))


def test_a_fixed_size_run_is_judged_as_before():
    """Without --elastic nothing here applies: the fault record does not say the node is gone for
    good (the drill brings it back), so every node must end well, and the result is compared."""
    evidence = seen("kill-node-elastic")
    evidence.topology = evidence.topology.replace(min_nodes=None)
    evidence.extra["fault"]["lost_for_good"] = False
    assert resize.expected_to_finish(evidence) == evidence.codes and resize.not_comparable(evidence) == ""
    report = judge.judge(evidence)
    assert not checks(report)["the job finished with exit 0"] and "world_sizes_after" not in report.facts
    assert checks(report)[judge.COMPARED] is False  # at the size of the reference, a different result is a failure


def test_a_sampler_position_kept_per_rank_repeats_samples_at_the_new_size_counted_and_explained():
    """tests/user_scripts/mid_epoch_resume.py (2 x 2, 256 samples, batches of 4 a rank: 16 steps an
    epoch at 4 ranks, 32 at 2) keeps its place as the global step. Saved at step 20 (epoch 1, its
    4th step) and resumed on 2 ranks, it reads step 20 as epoch 0's 20th of 32 steps. By hand: it
    deals epoch 0's positions 80..127 a rank again (12 steps x 2 ranks x 4 = 96 samples, all of
    epoch 0 consumed at 4 ranks), then epoch 1 from its start, whose first 64 samples (4 ranks x 4
    steps x 4 at world 4; 2 ranks x 8 steps x 4 at world 2) it takes again: 160 repeated. The
    first repeat is rank 0's first step at world 2, step 21."""
    report = judge.judge(seen("kill-node-elastic-samples"))
    assert report.facts["world_sizes_after"] == [2] and report.facts["samples"]["repeated"] == 96 + 64
    failed = [c for c in report.checks if not c.ok]
    assert [c.name for c in failed] == ["every sample once per epoch"]
    assert "first repeat: sample" in failed[0].detail and "again at rank 0's step 21" in failed[0].detail
    assert "the job's world changed (4 -> 2)" in failed[0].detail and "consumed" in failed[0].detail


def test_an_elastic_drill_whose_fault_never_fired_compares_its_result_as_any_run():
    """No fault, no change of size: the result is judged, and nothing asks for the fault's record."""
    evidence = seen("kill-node-elastic")
    evidence.extra.pop("fault")
    evidence.extra["fire"] = None
    assert resize.worlds_after(evidence) == [] and resize.not_comparable(evidence) == ""
    report = judge.judge(evidence)
    assert checks(report)["the fault fired while the job ran"] is False and judge.COMPARED in checks(report)
