"""A drill per misconfiguration (lab.doctor.drills), judged on what real runs did: each recorded
row (tests/fixtures/doctor_drills/, from `lab exercise run NAME` on netns and loopback hosts)
passes, and the same row with one thing gone wrong fails the check that should catch it. The
commands around it: each misconfiguration is an exercise, listed, explained, its --bound checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.cli import build_parser
from lab.doctor import drills
from lab.errors import LabError
from lab.runtimes.misconfig import MISCONFIGS

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "doctor_drills"


def recorded(name: str) -> tuple[dict, dict]:
    row = json.loads((RECORDED / f"{name}.json").read_text())
    return row["job"], row["doctor"]


def failed(report) -> list[str]:
    return [c.name for c in report.checks if not c.ok]


@pytest.mark.parametrize("name", sorted(p.stem for p in RECORDED.glob("*.json")))
def test_each_recorded_run_passes(name):
    job, doctor = recorded(name)
    report = drills.judge(MISCONFIGS[name], job, doctor, 90.0)
    assert report.verdict == "pass", report.checks


def test_a_job_that_trained_through_a_breaking_misconfiguration_fails_the_drill():
    job, doctor = recorded("interface-missing")  # measured: fails in 12 s, gloo finds no eth9
    report = drills.judge(MISCONFIGS["interface-missing"], {**job, "job": "passed", "error": ""}, doctor, 90.0)
    assert failed(report) == ["the job does not train: it fails or hangs"]


def test_a_doctor_that_named_nothing_fails_the_drill_saying_the_words_it_wanted():
    job, doctor = recorded("rendezvous-port-taken")
    report = drills.judge(MISCONFIGS["rendezvous-port-taken"], job, {**doctor, "named": False, "finding": ""}, 90.0)
    assert failed(report) == ["lab doctor names it on node0, in one line"]
    assert report.checks[-1].detail == "no finding about node0 says 'the rendezvous port is already in use'"


def test_a_misconfiguration_the_job_copes_with_fails_if_the_job_hung():
    job, doctor = recorded("hostname-on-loopback")  # measured: the job passes, the doctor says a note
    hung = {**job, "job": "hung", "job_s": 90.0}
    report = drills.judge(MISCONFIGS["hostname-on-loopback"], hung, doctor, 90.0)
    assert failed(report) == ["the job passes all the same (torch 2.13's gloo copes)"]
    assert report.checks[0].detail == "hung: still running at 90 s"


def test_every_misconfiguration_is_an_exercise_with_its_bound():
    for name in MISCONFIGS:
        args = build_parser().parse_args(["exercise", "run", name, "--bound", "30"])
        assert args.drill.misconfig is MISCONFIGS[name] and args.bound == 30.0
    assert build_parser().parse_args(["exercise", "run", "firewall"]).bound == 90.0


def test_the_explanation_names_the_node_blamed_and_the_command():
    text = drills.drills()["firewall"].explanation()
    assert "lab exercise run firewall" in text and 'names it on node0 ("...cannot reach...")' in text
    assert "fails or hangs" in text
    assert "passes all the same" in drills.drills()["hostname-unresolvable"].explanation()


def test_a_bound_of_zero_is_one_line_and_a_depth_is_refused():
    from lab.cli import exercise_misconfig

    with pytest.raises(LabError, match="--bound must be above 0 seconds, got 0"):
        exercise_misconfig.handle(build_parser().parse_args(["exercise", "run", "firewall", "--bound", "0"]))
    with pytest.raises(LabError, match="misconfiguration drill: it has one explanation"):
        exercise_misconfig.explanation("firewall", "beginner")
    assert exercise_misconfig.explanation("kill-worker", None) is None  # a fault drill: explained as before
