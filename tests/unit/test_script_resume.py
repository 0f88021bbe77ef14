"""The script judge's resume checks (lab.exercises.script.resume) on a recorded kill-worker run
(tests/fixtures/drills), edited into the resumes a real script makes: from a sparse snapshot,
from an older checkpoint than its newest, from the start, and ranks resuming apart. No process runs."""

from __future__ import annotations

import re

from test_script_judge import failed, seen

from lab.exercises.script import judge
from lab.exercises.seen import Seen


def resumed_from_the_start(evidence: Seen, ranks: set[int] | None = None) -> float:
    """The same run, but the ranks (all: DDP keeps them together) count from 0 again after the
    restart (a sparse snapshot's resume): returns when rank 0 first stepped before the fault."""
    fault_time = evidence.extra["fault"]["time"]
    restarted = min(e["time"] for e in evidence.events if e["event"] == "start" and e["time"] > fault_time)
    after = [e for e in evidence.events if e["event"] == "step" and e["time"] > restarted]
    for rank in {e["rank"] for e in after} if ranks is None else ranks:
        again = [e for e in after if e["rank"] == rank]
        offset = again[0]["step"]
        for e in again:
            e["step"] -= offset
    return min(e["time"] for e in evidence.events if e["event"] == "step" and e["rank"] == 0)


def saved_at(evidence: Seen, when: float) -> None:
    first = next(e for e in evidence.events if e["rank"] == 0)
    evidence.events.append({**first, "event": "saved", "time": when, "path": "snapshot.pt", "how": "torch.save"})
    evidence.events.sort(key=lambda e: e["time"])


def test_a_sparse_snapshot_reloaded_after_the_fault_is_a_resume_with_the_work_redone_said():
    """The issue's case: snapshots every 10 epochs, killed at epoch 3, it reloads the epoch-0
    snapshot and redoes the epochs since: right, and the verdict says what was redone."""
    evidence = seen("kill-worker")
    first_step = resumed_from_the_start(evidence)
    saved_at(evidence, first_step + 0.01)  # its one snapshot, after epoch 0
    report = judge.judge(evidence)
    assert report.verdict == "pass", report.checks
    resumed = next(c for c in report.checks if c.name.startswith("it resumed"))
    assert "its newest checkpoint before the fault (saved at epoch 0)" in resumed.detail, resumed.detail
    assert report.facts["work_redone"]["from"] == 0 and report.facts["work_redone"]["count"] >= 3


def test_a_resume_from_an_older_checkpoint_than_the_newest_fails_and_says_so():
    evidence = seen("kill-worker")
    resumed_from_the_start(evidence)
    saved_at(evidence, evidence.extra["fault"]["time"] - 0.01)  # the newest, just before the fault
    report = judge.judge(evidence)
    assert failed(report) == ["it resumed where it left off, not from the start"]
    assert "where it last saved" in report.checks[-1].detail


def test_a_restart_from_the_start_with_no_save_seen_is_not_called_a_resume():
    evidence = seen("kill-worker")
    resumed_from_the_start(evidence)
    report = judge.judge(evidence)
    assert failed(report) == ["it resumed where it left off, not from the start"]
    assert "no torch.save or dcp.save was seen" in report.checks[-1].detail


def test_ranks_that_resume_apart_are_named_first_with_where_each_started_again():
    """Pods with a working dir each: node1's ranks find no snapshot and start over while rank 0
    resumes; DDP then pairs collectives of different epochs. The verdict says that before the
    hang or failure it leads to, with the runtime's note on why."""
    evidence = seen("kill-worker")
    resumed_from_the_start(evidence, ranks={2, 3})
    evidence.extra["workdir_note"] = "each pod runs your script in a working dir of its own"
    report = judge.judge(evidence)
    assert failed(report)[0] == "every rank resumed at the same step"
    finding = report.facts["finding"]
    assert re.search(r"resumed apart: ranks 2, 3 at epoch 0; ranks 0, 1 at epoch [1-9]", finding), finding
    assert finding.endswith("(each pod runs your script in a working dir of its own)")
