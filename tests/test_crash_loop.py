"""Restart budgets that count progress (lab/node/restart_budget.py), on real jobs: a script that
fails at every start stops within K restarts with its own exit code, under `lab run`; the
crash-loop drill shows the other half (faults survived past K when the job makes progress)."""

import pytest
from conftest import SCRIPTS, needs_netns, report_of

from lab.node.restart_budget import CRASH_LOOP_EXIT

pytestmark = [pytest.mark.slow, needs_netns]


def test_a_script_that_fails_at_every_start_stops_in_k_restarts_with_the_reason(lab):
    out = lab(
        "run", "--nodes", "1", "--nproc-per-node", "2", "--max-restarts", "2", "--prometheus", "off",
        str(SCRIPTS / "fail_one_rank.py"), "--how", "raise",
        timeout=240,
    )  # fmt: skip
    said = out.stdout + out.stderr
    assert out.returncode == CRASH_LOOP_EXIT, said[-3000:]
    assert "crash loop: no progress in 2 restarts (no step seen)" in said
    assert "the group failed 3 times in all" in said, said[-3000:]  # the first try and 2 restarts (lab why)
    assert f"node exit codes {{'node0': {CRASH_LOOP_EXIT}}}" in out.stdout


def test_the_crash_loop_drill_outlives_its_budget_with_progress_and_stops_without(lab):
    out = lab("exercise", "run", "crash-loop", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["verdict"] == "pass", report
    assert report["restarts"] == 4 and report["crash_loop_restarts"] == 3
