"""What every drill's verdict says, on its recorded run (tests/unit/drill_cases.py): each check
named and saying what it saw, the explanation a text, and the job's end quoted as the nodes
exited. Mutation testing showed checks whose words could be lost with no test noticing
(docs/mutation.md). No process runs."""

from __future__ import annotations

import pytest
from drill_cases import CASES, judge, seen

# Checks whose name says all there is (nothing measured to quote).
SILENT = {
    "the restarted workers failed in connectFullMesh",
    "no restarted group ever completed a step",
    "no worker group ever started again",
    "the survivor waited in the next round while node0 was down (10 s and more)",
    "its log has no store error",
    "the injected collective ran",
}


@pytest.mark.parametrize("case", CASES)
def test_every_check_says_what_it_saw_and_the_verdict_says_why(case):
    evidence = seen(case)
    report = judge(case, evidence)
    assert report.checks
    for check in report.checks:
        assert isinstance(check.name, str) and check.name, check
        assert isinstance(check.detail, str) and (check.detail or check.name in SILENT), check
    assert isinstance(report.explanation, str)  # "" where the checks say it all
    facts = report.facts
    assert type(facts.get("restarts", 0)) is int and facts.get("restarts", 0) >= 0, facts
    assert facts.get("lost_steps") is None or type(facts["lost_steps"]) is int, facts
    for check in report.checks:
        if check.name == "the job succeeded":
            assert check.detail == f"exit codes {evidence.codes}"
