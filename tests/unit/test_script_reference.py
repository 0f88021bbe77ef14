"""The fault-free reference run on a user's script, judged (lab.exercises.script.judge): long
enough for a fault to fire, and a script that needs a GPU told how to run on a CPU runner. On
recorded drills read as references (tests/fixtures/drills/script-*); no process runs. The same
on real scripts: tests/test_ci_bad_scripts.py."""

from __future__ import annotations

from test_script_judge import failed, seen

from lab.exercises.script import judge
from lab.exercises.seen import Seen


def as_reference(evidence: Seen, at_step: int = 3, at_time_s: float = 15) -> Seen:
    """A recorded fault run read as a fault-free reference: what judge_reference checks."""
    keep = ("script", "script_args", "deadline_s", "workdir", "found_at_start", "own_workdir", "ckpt_dir")
    evidence.extra = {k: evidence.extra[k] for k in keep if k in evidence.extra}
    evidence.extra["fire_point"] = {"at_step": at_step, "at_time_s": at_time_s}
    return evidence


def test_a_reference_that_reaches_the_fire_point_passes():
    report = judge.judge(as_reference(seen("kill-worker")))
    assert report.verdict == "pass", report.checks
    assert [c.name for c in report.checks][-1] == "it runs long enough for a fault to fire"


def test_a_reference_that_ends_before_the_fire_step_fails_in_one_line():
    report = judge.judge(as_reference(seen("kill-worker"), at_step=100))
    assert failed(report) == ["it runs long enough for a fault to fire"]
    assert "; the faults fire at epoch 100 (--at-step): give it more work" in report.facts["finding"]


def test_a_reference_with_no_step_that_ends_sooner_than_the_clock_fires_fails():
    evidence = as_reference(seen("kill-worker"), at_time_s=10_000)
    evidence.events = [e for e in evidence.events if e["event"] != "step"]
    report = judge.judge(evidence)
    assert failed(report) == ["it runs long enough for a fault to fire"]
    assert "with no step printed; the faults fire 10000 s in (--at-time)" in report.facts["finding"]


def test_a_script_that_needs_a_gpu_on_a_cpu_runner_is_told_to_fall_back():
    evidence = as_reference(seen("kill-worker"))
    evidence.codes = {node: 1 for node in evidence.codes}
    start = min(e["time"] for e in evidence.events)
    died = {"event": "exit", "time": start + 1, "rank": 0, "reason": "exception", "where": "needs_gpu.py:12"}
    evidence.events = [{**died, "error": "AssertionError: Torch not compiled with CUDA enabled"}]
    report = judge.judge(evidence)
    assert failed(report)[0] == "the fault-free run finished with exit 0"
    assert "Torch not compiled with CUDA enabled (needs_gpu.py:12) (it needs a GPU" in report.facts["finding"]
    assert judge.CPU_FALLBACK in report.facts["finding"]
