"""`lab ci`'s outputs and refusals without a run: JUnit XML from verdicts the script judge drew
on recorded drills (tests/fixtures/drills/script-*), and each bad input one line before anything
starts. The whole command on a real script: tests/test_ci_kit.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import lab_in_process
from test_cli_errors import assert_one_line_error

from lab.exercises.script import judge, junit
from lab.exercises.seen import Seen

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"
SCRIPT = Path(__file__).resolve().parents[1] / "user_scripts" / "snapshot_every_epoch.py"


def row(case: str, fault: str) -> dict:
    report = judge.judge(Seen.load(FIXTURES / case / "seen.json"))
    return {
        "fault": fault,
        "verdict": report.verdict,
        "finding": report.facts["finding"],
        "checks": [c.__dict__ for c in report.checks],
    }


def test_faults_not_run_after_a_failed_reference_are_each_a_case_saying_why():
    """The matrix lists them (lab.exercises.script.matrix): a CI's report shows what never ran."""
    from lab.exercises.script.matrix import Row

    why = "not run: the fault-free reference did not pass (fail)"
    record = {
        "script": "exits_at_once.py",
        "rows": [
            {"fault": "reference", "verdict": "fail", "finding": "it runs long enough for a fault to fire: no."},
            Row("kill-worker", not_run=why).to_json(),
            Row("hang-rank", not_run=why).to_json(),
        ],
    }
    suites = ET.fromstring(junit.junit_xml(record).split("\n", 1)[1])
    assert {k: suites.attrib[k] for k in ("tests", "failures", "errors")} == {
        "tests": "3",
        "failures": "1",
        "errors": "2",
    }
    cases = {c.attrib["name"]: c for c in suites.iter("testcase")}
    assert [cases[name].find("error").attrib["message"] for name in ("kill-worker", "hang-rank")] == [why, why]


def test_a_failed_verdict_is_a_failure_with_its_finding_and_checks_a_pass_a_plain_case():
    record = {
        "script": "never_loads.py",
        "rows": [row("script-kill-worker", "kill-worker"), row("script-never-loads", "kill-worker (never loads)")],
    }
    record["rows"].append({"fault": "preempt", "verdict": "error", "finding": "preempt on node0: no such node"})
    suites = ET.fromstring(junit.junit_xml(record).split("\n", 1)[1])
    totals = {k: suites.attrib[k] for k in ("tests", "failures", "errors")}
    assert totals == {"tests": "3", "failures": "1", "errors": "1"}
    cases = {c.attrib["name"]: c for c in suites.iter("testcase")}
    assert list(cases) == ["kill-worker", "kill-worker (never loads)", "preempt"]
    assert cases["kill-worker"].find("failure") is None and cases["kill-worker"].find("error") is None
    failure = cases["kill-worker (never loads)"].find("failure")
    assert failure is not None and "does not load its checkpoint" in failure.attrib["message"]
    assert "[FAIL] it resumed where it left off, not from the start" in (failure.text or "")
    assert cases["preempt"].find("error").attrib["message"] == "preempt on node0: no such node"


def test_a_finding_with_markup_stays_well_formed():
    record = {"script": "s.py", "rows": [{"fault": "x<&>", "verdict": "fail", "finding": 'a "<b>" & c', "checks": []}]}
    case = ET.fromstring(junit.junit_xml(record).split("\n", 1)[1]).find("testsuite/testcase")
    assert case is not None and case.attrib["name"] == "x<&>"
    assert case.find("failure").attrib["message"] == 'a "<b>" & c'


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], ["needs --script PATH"]),
        (["--script", "no/such/train.py"], ["script not found", "no/such/train.py"]),
        (["--script", str(SCRIPT), "--junit", "no/such/dir/junit.xml"], ["--junit", "no/such/dir", "does not exist"]),
        (["--script", str(SCRIPT), "--summary", "no/such/dir/summary.md"], ["--summary", "does not exist"]),
        (["--script", str(SCRIPT), "--report-dir", "/dev/null/report"], ["/dev/null is not a folder"]),
        (["--script", str(SCRIPT), "--summary", "."], ["--summary", "is not a regular file"]),
        (["--script", str(SCRIPT), "--faults", "kill-worker,nosuch"], ["--faults", "nosuch"]),
        (["--script", str(SCRIPT), "--recovery", "in-process"], ["--recovery in-process", "use --recovery restart"]),
        (
            ["--script", str(SCRIPT), "--faults", "kill-node"],  # lab ci runs one node
            ["kill-node needs at least 2 nodes"],
        ),
        (["--script", str(SCRIPT), "--recovery", "fast"], ["--recovery", "invalid choice"]),
        (["--script", str(SCRIPT), "--report-dir", ""], ["--report-dir is empty"]),
        (["--script", str(SCRIPT), "--junit", ""], ["--junit is empty"]),
        (["--script", str(SCRIPT), "--nproc-per-node", "0"], ["--nproc-per-node", "1 or more, got 0"]),
    ],
)
def test_bad_input_is_one_line_and_nothing_runs(tmp_path, capsys, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    out = lab_in_process(capsys, "ci", "--run-dir", str(tmp_path / "run"), *args)
    assert_one_line_error(out, *words)
    assert not (tmp_path / "run").exists()
    assert not (tmp_path / "lab-ci-report").exists()


def test_the_workflow_file_is_the_one_the_doc_shows_and_keeps_what_lab_ci_leaves():
    import re

    import yaml

    docs = Path(__file__).resolve().parents[2] / "docs"
    shown = yaml.safe_load(re.search(r"```yaml\n(.*?)```", (docs / "ci.md").read_text(), re.S).group(1))
    shipped = yaml.safe_load((docs / "ci-workflow.yml").read_text())
    assert shipped["jobs"] == shown["jobs"]
    steps = shipped["jobs"]["fault-tolerance"]["steps"]
    run = next(s["run"] for s in steps if s.get("run", "").startswith("lab ci "))
    junit = run.split("--junit ")[1].split()[0]
    kept = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert kept["if"] == "always()" and kept["with"]["path"].split() == ["lab-ci-report", junit]


def test_the_knobs_lab_ci_names_are_its_own_and_reach_the_drills():
    """issue 56: lab ci's messages named --progress-regex, --at-step, --at-time, --deadline and
    --ckpt-dir, which it lacked (corrupt-checkpoint was refused for want of a --ckpt-dir)."""
    import argparse

    from lab.cli import build_parser
    from lab.cli.ci import matrix_argv
    from lab.cli.exercise_script import register_matrix

    given = ["--at-step", "5", "--progress-regex", r"done (\d+)", "--at-time", "3", "--deadline", "60"]
    args = build_parser().parse_args(["ci", "--script", "train.py", *given, "--ckpt-dir", "ck", "--rdzv-port", "29511"])
    verbs = argparse.ArgumentParser().add_subparsers()
    register_matrix(verbs)
    drills = verbs.choices["matrix"].parse_args(matrix_argv(args)[2:])
    assert (drills.at_step, drills.progress_regex, drills.at_time, drills.deadline) == (5, r"done (\d+)", 3.0, 60.0)
    assert drills.ckpt_dir == "ck" and drills.rdzv_port == 29511 and drills.nodes == 1
