"""The CI kit's pytest option (lab.pytest_plugin) without a drill run: what it collects, what
it refuses, and how a verdict becomes a test outcome (verdicts drawn by the script judge on
recorded drills). The whole option on a real script, from a fresh virtualenv:
tests/test_ci_fresh_venv.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ci_outputs import row

from lab import pytest_plugin

pytest_plugins = ["pytester"]
SCRIPT = Path(__file__).resolve().parents[1] / "user_scripts" / "snapshot_every_epoch.py"


def test_without_the_option_it_adds_nothing(pytester):
    pytester.makepyfile(test_mine="def test_mine():\n    pass\n")
    assert pytester.runpytest("--collect-only", "-q").outlines[0] == "test_mine.py::test_mine"


def test_with_the_option_each_drill_is_a_case_beside_the_projects_own(pytester):
    pytester.makepyfile(test_mine="def test_mine():\n    pass\n")
    listed = pytester.runpytest(
        "--collect-only", "-q", "--lab-script", str(SCRIPT), "--lab-faults", "kill-worker,preempt"
    )
    assert listed.outlines[:4] == [
        "test_mine.py::test_mine",
        "lab-drills::reference",
        "lab-drills::kill-worker",
        "lab-drills::preempt",
    ]


def test_a_script_that_does_not_exist_is_one_line_before_anything_runs(pytester):
    result = pytester.runpytest("--lab-script", "missing.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.errlines if line.strip()] == ["ERROR: --lab-script: script not found: missing.py"]


def test_a_passing_verdict_passes_a_failing_one_fails_with_its_finding_and_checks():
    assert pytest_plugin.failure("kill-worker", row("script-kill-worker", "kill-worker"), "") == ""
    why = pytest_plugin.failure("kill-worker", row("script-never-loads", "kill-worker"), "")
    first, *checks = why.splitlines()
    assert first.startswith("kill-worker: fail: it resumed where it left off, not from the start: no.")
    assert "[FAIL] it resumed where it left off, not from the start: restarted from step 0" in checks[-1]


def test_a_case_lab_ci_gave_no_verdict_for_fails_with_what_stopped_it():
    stopped = "lab ci: error: the fault-free reference failed: exit status 1"
    assert pytest_plugin.failure("hang-rank", None, stopped) == stopped
