"""How `lab chaos --script` judges the end of the user's job (lab.chaos._judge): every node with
exit 0, or the codes that say otherwise, with a node still running at the bound said as such (it
was stopped, as a scheduler stops a fixed-size job that lost a node: lab.chaos.script_job_end)."""

from __future__ import annotations

import pytest

from lab import chaos
from lab.report import Report


def judged(codes: dict | None) -> dict[str, tuple[bool, str]]:
    record = {"faults_injected": 0, "stuck": 0, "findings": [], "final_weights": {"identical": None}}
    if codes is not None:
        record["exit_codes"] = codes
    report = Report("chaos", "local", 4)
    chaos._judge(report, record, chaos.Plan(faults=[], seed=1, load=0), on_script=codes is not None, loaded=0)
    return {c.name: (c.ok, c.detail) for c in report.checks}


def test_a_script_whose_every_node_ended_with_exit_0_ended_well():
    assert judged({"node0": 0, "node1": 0})["the job ended with exit 0"] == (
        True,
        "node exit codes {'node0': 0, 'node1': 0}",
    )


@pytest.mark.parametrize(
    ("codes", "said"),
    [
        ({"node0": 1, "node1": -15}, "node exit codes {'node0': 1, 'node1': -15}"),
        ({"node0": None, "node1": 1}, "node exit codes {'node0': None, 'node1': 1} (None: still running at the "
                                      "bound, stopped)"),
    ],
)  # fmt: skip
def test_a_node_that_failed_or_never_ended_fails_the_end_check_saying_which(codes, said):
    assert judged(codes)["the job ended with exit 0"] == (False, said)


def test_the_trainers_campaign_has_no_such_check():
    assert "the job ended with exit 0" not in judged(None)
