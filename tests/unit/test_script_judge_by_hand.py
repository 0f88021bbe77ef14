"""The script judge (lab.exercises.script.judge) on runs written by hand (script_runs.py): the
facts and every check's words, each read off the run's lines, not off an earlier verdict.
Written where mutation testing showed facts nothing checked (docs/mutation.md). No process runs."""

from __future__ import annotations

from script_runs import FAULT_TIME, clean_run, killed_run, record, steps

from lab.exercises.script import judge
from lab.report import Check

CODES_OK = "node exit codes {'node0': 0, 'node1': 0}"


def test_a_reference_run_reports_what_it_did_and_nothing_else():
    report = judge.judge(clean_run({"at_step": 4, "at_time_s": 15}))
    assert report.facts == {
        "script": "train.py",
        "script_args": ["--epochs", "3"],
        "deadline_s": 180.0,
        "workdir": "/runs/work/kill-worker",
        "progress": {"source": "output", "unit": "step", "first": 0, "last": 4},
        "restarts": 0,
        "shared_writes": [],
        "finding": "finished",
    }
    assert report.checks == [
        Check("the fault-free run finished with exit 0", True, CODES_OK),
        Check(
            "it runs long enough for a fault to fire",
            True,
            "its last step was 4; the faults fire at step 4 (--at-step)",
        ),
    ]
    assert report.explanation == "finished"


def test_a_reference_without_a_fire_point_is_not_measured_against_one():
    report = judge.judge(clean_run(None))
    assert [c.name for c in report.checks] == ["the fault-free run finished with exit 0"]


def test_a_failed_reference_quotes_its_first_error_once():
    evidence = clean_run(None)
    evidence.codes["node1"] = 2
    evidence.events += [
        record(0.5, "exit", 1, reason="exit_status", code=2, stderr=["usage: train.py", "error: bad --lr  ", ""]),
        record(0.6, "exit", 0, reason="exception", error="ValueError: no data", where="train.py:4"),
    ]
    check = judge.judge(evidence).checks[0]
    assert check == Check(
        "the fault-free run finished with exit 0",
        False,
        "node exit codes {'node0': 0, 'node1': 2}; exit status 2: error: bad --lr",
    )


def test_a_reference_that_found_no_file_is_told_where_it_ran():
    evidence = clean_run(None)
    evidence.codes["node0"] = 1
    evidence.events.append(
        record(0.5, "exit", 0, reason="exception", error="FileNotFoundError: data.csv", where="train.py:2")
    )
    assert judge.judge(evidence).checks[0].detail == (
        "node exit codes {'node0': 1, 'node1': 0}; FileNotFoundError: data.csv (train.py:2) (it ran in a fresh "
        "working dir, /runs/work/kill-worker: --workdir DIR runs it where its files are)"
    )


def test_a_reference_that_prints_no_step_is_timed_from_its_process_group():
    """Up at 2 s (its process group), last record at 19 s: 17 s, exactly the fire time."""
    evidence = clean_run({"at_step": 4, "at_time_s": 17})
    evidence.events = [e for e in evidence.events if e["event"] != "step"]
    evidence.events += [record(19, "exit", r, reason="completed", checksum="0x1p+0") for r in (0, 1)]
    report = judge.judge(evidence)
    assert report.facts["progress"] == {"source": "none", "unit": None}
    assert report.checks[1] == Check(
        "it runs long enough for a fault to fire",
        True,
        "it ended 17.0 s after its process group was up, with no step printed; the faults fire 17 s in (--at-time)",
    )
    evidence.extra["fire_point"]["at_time_s"] = 17.5
    assert judge.judge(evidence).checks[1].detail.endswith("fire 17.5 s in (--at-time): give it more work")


def test_files_found_before_the_run_say_where_they_came_from():
    def first_check(own_workdir: bool) -> Check:
        evidence = clean_run(None, ckpt_dir="ckpt", found_at_start=["a.pt", "b.pt"], own_workdir=own_workdir)
        return judge.judge(evidence).checks[0]

    said = "ckpt already held a.pt, b.pt before the run: {}; this is not judged as a recovery"
    assert first_check(True) == Check(
        "it started from a clean slate", False, said.format("left in --workdir by an earlier run (clear them)")
    )
    assert first_check(False) == Check(
        "it started from a clean slate",
        False,
        said.format("an absolute --ckpt-dir reused across runs (clear it, or make it relative)"),
    )


def test_a_fault_that_never_fired_quotes_the_error_that_ended_the_script_first():
    evidence = killed_run(fire=None, at_step=4)
    evidence.events.append(record(0.5, "exit", 1, reason="exception", error="KeyError: 'lr'", where="train.py:7"))
    assert judge.judge(evidence).checks == [
        Check(
            "the fault fired while the job ran",
            False,
            "the script failed before the fault: KeyError: 'lr' (train.py:7)",
        )
    ]


def test_a_killed_run_that_resumed_reports_its_facts():
    report = judge.judge(killed_run())
    facts = report.facts
    assert facts["restarts"] == 1 and facts["errors_after_fault"] == [
        "RuntimeError: Connection closed by peer (t.py:9)"
    ]
    assert facts["loaded_after_fault"] == ["ckpt.pt"]
    assert facts["newest_checkpoint_before_fault"] == {"unit": "step", "at": 2}
    assert facts["work_redone"] == {"unit": "step", "count": 2, "from": 3, "to": 4}
    assert facts["recovery"]["total"] == 11 - FAULT_TIME  # the first step after the restart
    assert report.checks == [
        Check("the job finished with exit 0", True, CODES_OK),
        Check("torchrun restarted the workers", True, "restarts 1"),
        Check(
            "it resumed where it left off, not from the start",
            True,
            "step 4 reached before the fault, resumed at step 3: 2 step(s) redone; loaded ckpt.pt",
        ),
    ]
    assert facts["finding"] == "finished; 1 restart(s), redid 2 step(s) (3..4), first step 3.5 s after the fault"
    assert report.explanation == facts["finding"]


def test_only_rank_0s_loads_after_the_fault_count_and_three_are_kept():
    evidence = killed_run()
    evidence.events += [
        record(FAULT_TIME, "loaded", 0, path="at-the-fault.pt"),
        record(10.6, "loaded", 1, 1, path="rank1.pt"),
    ] + [record(10.7 + i / 10, "loaded", 0, 1, path=f"more{i}.pt") for i in range(3)]
    assert judge.judge(evidence).facts["loaded_after_fault"] == ["ckpt.pt", "more0.pt", "more1.pt"]


def test_a_fault_with_no_recovery_to_judge_reports_none_and_no_restart():
    evidence = killed_run(recovery="none", forensics={"finding": "rank 1 stopped in all_reduce"})
    evidence.events = [e for e in evidence.events if e["restart"] == 0]
    report = judge.judge(evidence)
    assert report.facts["recovery"] is None and report.facts["work_redone"] is None
    assert report.facts["forensics"] == {"finding": "rank 1 stopped in all_reduce"}
    assert Check("no restart was needed", True, "restarts 0") in report.checks
    assert "torchrun restarted the workers" not in [c.name for c in report.checks]
    assert report.facts["finding"].endswith("; forensics: rank 1 stopped in all_reduce")


def test_a_script_with_no_step_signal_is_judged_by_what_it_loaded():
    evidence = killed_run()
    evidence.events = [e for e in evidence.events if e["event"] != "step"]
    report = judge.judge(evidence)
    assert report.checks[-1] == Check(
        "it loaded a checkpoint when it started again", True, "loaded ckpt.pt (no step signal: work redone unknown)"
    )
    assert report.facts["work_redone"] is None
    assert report.facts["finding"] == "finished; 1 restart(s)"  # no step: no first step to time
    evidence.events = [e for e in evidence.events if e["event"] != "loaded"]
    assert judge.judge(evidence).checks[-1] == Check(
        "it loaded a checkpoint when it started again",
        False,
        "no torch.load or dcp.load after the fault, and no step signal to tell: print 'step N' (or call "
        "lab.progress.step(n)) and say where it checkpoints (--ckpt-dir) to make both visible",
    )


def test_a_run_already_restarted_before_the_fault_is_not_judged_further():
    evidence = killed_run()
    evidence.events.append(record(6.0, "start", 1, 1))
    report = judge.judge(evidence)
    assert report.checks == [
        Check(
            "the script ran until the fault",
            False,
            "the script failed before the fault: torchrun had restarted its workers already (a failure its "
            "output does not name)",
        )
    ]


def test_the_result_compared_is_a_check_and_a_fact():
    report = judge.judge(killed_run(compared=(True, "equal (1 file)")))
    assert Check(judge.COMPARED, True, "equal (1 file)") in report.checks
    assert report.facts["compared"] == "equal (1 file)" and report.facts["result_differs"] is False
    assert report.facts["finding"].endswith(", result equal (1 file)")
    report = judge.judge(clean_run(None, compared=(True, "equal (1 file)"), repeat=True))
    assert Check(judge.REPEATED, True, "equal (1 file)") in report.checks
    unjudged = judge.judge(killed_run(compared=(False, "differs: w.pt"), not_deterministic="two references differ"))
    assert unjudged.facts["compared"] == "differs: w.pt (not judged: two references differ)"
    assert judge.COMPARED not in [c.name for c in unjudged.checks]


def test_several_ranks_writing_one_file_are_said_in_the_finding():
    evidence = killed_run()
    evidence.events += [record(5.6, "saved", r, path="/w/ckpt.pt", file="/w/ckpt.pt", how="torch.save") for r in (0, 1)]
    report = judge.judge(evidence)
    assert report.facts["shared_writes"] == [{"path": "/w/ckpt.pt", "ranks": [0, 1]}]
    assert "; 2 ranks (0, 1) each wrote /w/ckpt.pt, one file at once" in report.facts["finding"]


def test_progress_read_from_files_is_said_and_a_resume_that_redid_nothing_too():
    report = judge.Report("script", "local", 2)
    report.facts.update(
        restarts=1,
        work_redone={"unit": "epoch", "count": 0, "from": 5, "to": 4},
        progress={"source": "checkpoint files", "unit": "epoch"},
    )
    assert judge.finding(report) == (
        "finished; 1 restart(s), redid no epoch, progress read from checkpoint files (no step in the output; "
        "work redone unknown)"
    )


def test_a_recovery_timed_without_a_unit_is_timed_to_the_first_step():
    report = judge.Report("script", "local", 2)
    report.facts.update(progress={"source": "checkpoint files", "unit": None}, recovery={"total": 2.25})
    assert judge.finding(report).startswith("finished; first step 2.2 s after the fault, progress read from")


def test_samples_recorded_by_the_script_are_judged():
    evidence = killed_run()
    for e in evidence.events:
        if e["event"] == "step":
            e.update(epoch=0, samples=[e["step"] * 2 + e["rank"]])
    evidence.events += steps([10], 21, restart=1)  # a later epoch began: epoch 0's skips are judged
    for e in evidence.events[-2:]:
        e.update(epoch=1, samples=[e["rank"]])
    report = judge.judge(evidence)
    assert report.facts["samples"]["repeated"] == 0 and report.facts["samples"]["skipped"] == 0
    assert [c.name for c in report.checks if c.name.startswith("every sample")] == ["every sample once per epoch"]
