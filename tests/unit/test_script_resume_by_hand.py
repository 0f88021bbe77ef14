"""Did a user's script resume (lab.exercises.script.resume), and what did its ranks die of
(judge.errors, failed_before, check_finished): each branch on progress and events written by
hand, its words checked whole. Written where mutation testing showed branches no test told
apart (docs/mutation.md). No process runs."""

from __future__ import annotations

from script_runs import record, steps

from lab.exercises.script import judge, resume
from lab.report import Check, Report

RESUMED = "it resumed where it left off, not from the start"


def resumed(seg: dict, loaded: list[str], saved: dict | None) -> tuple[Check, dict]:
    report = Report("script", "local", 2)
    report.facts["progress"] = {}
    resume.check_resumed(report, seg, "step", loaded, saved)
    return report.checks[0], report.facts


def seg(first: int | None, reached: int | None, resumed_at: int | None) -> dict:
    return {"first": first, "reached": reached, "resumed_at": resumed_at, "last": 9}


def test_a_resume_past_its_start_counts_the_steps_redone():
    check, facts = resumed(seg(0, 6, 4), [], {"unit": "step", "at": 4})
    assert check == Check(RESUMED, True, "step 6 reached before the fault, resumed at step 4: 3 step(s) redone")
    assert facts["work_redone"] == {"unit": "step", "count": 3, "from": 4, "to": 6}
    assert facts["newest_checkpoint_before_fault"] == {"unit": "step", "at": 4}
    assert facts["progress"] == seg(0, 6, 4)
    _, facts = resumed(seg(0, 6, 8), [], None)  # beyond where it was: nothing redone, never negative
    assert facts["work_redone"]["count"] == 0


def test_a_resume_from_a_sparse_snapshot_names_where_it_was_saved():
    check, _ = resumed(seg(0, 6, 0), ["snap.pt"], {"unit": "step", "at": 0})
    assert check == Check(
        RESUMED,
        True,
        "step 6 reached before the fault, resumed at step 0: 7 step(s) redone; loaded snap.pt, its newest "
        "checkpoint before the fault (saved at step 0)",
    )
    check, _ = resumed(seg(0, 6, 0), ["snap.pt"], {"unit": "step", "at": None})
    assert check.detail.endswith(", its newest checkpoint before the fault (saved before its first step)")


def test_each_way_a_restart_from_the_start_fails_says_what_was_seen():
    check, facts = resumed(seg(0, 6, None), [], None)
    assert check == Check(RESUMED, False, "no step after the workers started again")
    assert facts["work_redone"] is None
    assert resumed(seg(0, 6, 0), ["a.pt"], {"unit": "step", "at": 4})[0] == Check(
        RESUMED, False, "loaded a.pt but resumed at step 0, before step 4 where it last saved"
    )
    assert resumed(seg(0, 6, 0), ["a.pt"], None)[0] == Check(
        RESUMED,
        False,
        "restarted from step 0 although it loaded a.pt: no torch.save or dcp.save was seen before the fault, so "
        "nothing says that file held any progress",
    )
    assert resumed(seg(0, 6, 0), [], None)[0] == Check(
        RESUMED,
        False,
        "restarted from step 0 and loaded no file; no torch.save or dcp.save was seen before the fault either: it "
        "came before the first checkpoint (fire later: --at-step, --at-time), or your script does not checkpoint",
    )
    said = (
        "restarted from step 0 and no load was seen after the fault, though it saved a checkpoint{} before it: "
        "either it does not load its checkpoint on start, or it loads through a file object or fsspec (not seen) "
        "and its progress is printed in words the lab did not read (--progress-regex says how it prints it)"
    )
    assert resumed(seg(0, 6, 0), [], {"unit": "step", "at": 4})[0] == Check(RESUMED, False, said.format(" at step 4"))
    assert resumed(seg(0, 6, 0), [], {"unit": "step", "at": None})[0] == Check(RESUMED, False, said.format(""))


def test_ranks_that_resumed_apart_are_named_by_where_they_resumed():
    report = Report("script", "local", 3)
    resume.check_together(report, {0: 5, 1: 0, 2: 5}, "epoch", {})
    assert report.checks == [
        Check(
            "every rank resumed at the same step",
            False,
            "the ranks resumed apart: rank 1 at epoch 0; ranks 0, 2 at epoch 5",
        )
    ]
    report = Report("script", "local", 2)
    resume.check_together(report, {0: 5, 1: 0}, "epoch", {"workdir_note": "each node ran in its own dir"})
    assert report.checks[0].detail == (
        "the ranks resumed apart: rank 1 at epoch 0; rank 0 at epoch 5 (each node ran in its own dir)"
    )
    resume.check_together(report, {0: 5, 1: 5}, "epoch", {})
    assert len(report.checks) == 1  # together: nothing to say


def test_the_newest_save_is_the_last_before_the_restart_with_the_step_it_followed():
    """A save at the very moment the group restarted belongs to the new group; the step rank 0
    printed at the moment of the save is the one it holds."""
    events = steps(range(5), 3) + [
        record(5.0, "saved", 0, path="ckpt.pt"),  # with step 2, printed at 5.0
        record(9.0, "saved", 0, path="late.pt"),
        record(9.0, "start", 0, 1),
    ]
    assert resume.newest_save(events, 7.5, "output", "step") == {"unit": "step", "at": 2}
    assert resume.newest_save(events[:-3], 7.5, "output", "step") is None


def test_errors_are_read_between_the_times_given_each_once_at_most_three():
    events = [
        record(5.0, "exit", 0, reason="exception", error="E: at the start", where="t.py:1"),
        record(6.0, "exit", 1, reason="exit_status", code=1, stderr=[]),
        record(6.5, "exit", 1, reason="exit_status", code=3, stderr=["  ", "bad flag\n"]),
        record(7.0, "exit", 0, reason="exception", error="E: three", where="t.py:3"),
        record(8.0, "exit", 0, reason="exception", error="E: four", where="t.py:4"),
        record(9.0, "exit", 0, reason="exception", error="E: at the end", where="t.py:9"),
    ]
    assert judge.errors(events, 5.0, 9.0) == ["exit status 1", "exit status 3: bad flag", "E: three (t.py:3)"]
    assert judge.errors(events[3:], 5.0, 9.0) == ["E: three (t.py:3)", "E: four (t.py:4)"]  # not the one at 9.0


def test_a_failure_before_the_fault_is_an_error_or_a_restart_strictly_before_it():
    events = [record(0.5, "exit", 1, reason="exception", error="OSError: no data", where="t.py:2")]
    assert judge.failed_before(events, 7.5) == "OSError: no data (t.py:2)"
    assert judge.failed_before([record(7.5, "start", 0, 1)], 7.5) == ""
    assert judge.failed_before([record(7.4, "start", 0, 1)], 7.5) == (
        "torchrun had restarted its workers already (a failure its output does not name)"
    )


def test_the_job_finished_check_quotes_an_error_only_when_it_failed():
    def finished(codes: dict, errors_after: list[str]) -> Check:
        report = Report("script", "local", 2)
        report.facts.update(errors_after_fault=errors_after, deadline_s=180.0)
        judge.check_finished(report, codes)
        return report.checks[0]

    assert finished({"node0": 0, "node1": 0}, ["E: x (t.py:1)"]) == Check(
        "the job finished with exit 0", True, "node exit codes {'node0': 0, 'node1': 0}"
    )
    assert finished({"node0": 0, "node1": 1}, []).detail == "node exit codes {'node0': 0, 'node1': 1}"
    assert finished({"node0": 0, "node1": 1}, ["E: x (t.py:1)"]).detail.endswith("; E: x (t.py:1)")


def test_a_fault_before_the_first_save_names_the_step_a_later_fault_needs():
    """The HF-style script saving checkpoint-N/ every 10 steps, the fault at step 3: it first
    saved after the fault, at step 10 (the restarted run's), so --at-step 11 is advised."""
    report = Report("script", "local", 2)
    report.facts["progress"] = {}
    resume.check_resumed(report, seg(1, 3, 1), "step", [], None, {"unit": "step", "at": 10})
    assert report.checks[0].detail.endswith(
        "or your script does not checkpoint; it first saved after the fault, at step 10: --at-step 11 comes after it"
    )


def test_the_first_save_after_the_fault_is_read_at_the_step_the_script_was_on():
    step = lambda t, n: {"event": "step", "time": t, "rank": 0, "step": n, "source": "output", "unit": "step"}  # noqa: E731
    events = [
        step(1.0, 1), step(2.0, 2), step(3.0, 3),  # the fault at 3.5
        step(5.0, 1), *(step(5.0 + n, n) for n in range(2, 12)),
        {"event": "saved", "time": 15.5, "rank": 0, "path": "out/checkpoint-10/state.pt"},
    ]  # fmt: skip
    assert resume.first_save_after(events, 3.5, "output", "step") == {"unit": "step", "at": 10}
    assert resume.first_save_after(events, 20.0, "output", "step") is None
    # Its progress read no further than the save (a per-epoch bar no longer read): no step to advise.
    assert resume.first_save_after(events[:-2] + events[-1:], 3.5, "output", "step") == {"unit": "step", "at": None}
