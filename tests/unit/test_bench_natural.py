"""`lab bench natural` on the recorded corpus (tests/fixtures/natural): the cards drawn from the
kept evidence, graded into one table per half; the choice of cases refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.bench.natural import cases, grade, section
from lab.errors import LabError
from lab.why import card as why

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "natural"


def graded(names: list[str]) -> list[dict]:
    out = []
    for name in names:
        truth = json.loads((CORPUS / name / "truth.json").read_text())
        out.append(grade(name, truth, why.card(CORPUS / name, kernel=lambda: ""), ""))
    return out


def test_each_half_gets_its_table_and_a_miss_is_marked():
    rows = graded(["uneven_inputs", "thread_deadlock", "early_return"])
    lines = section(rows)
    assert "**tuning**: 1 of 1 right" in lines and "**held-out**: 1 of 2 right" in lines
    assert "| uneven_inputs | rank 1, left | rank 1, left | yes |" in lines
    assert "| early_return | rank 0, left | rank 0, hung | **no** |" in lines
    assert "- Goal: >= 90% right on the held-out half: **missed** (50%)" in lines
    assert "- Goal: no wrong rank named with confidence: **met** (0 cases)" in lines


def test_a_job_that_kept_no_evidence_is_graded_wrong_saying_why():
    row = grade("x", {"half": "held-out", "rank": 1, "kind": "exception"}, None, "the job kept no evidence")
    assert row["right"] is False and row["said"] is None and row["first_line"] == "the job kept no evidence"


def test_the_choice_of_cases_is_refused_in_one_line(tmp_path):
    assert set(cases(CORPUS, "uneven_inputs,early_return")) == {"uneven_inputs", "early_return"}
    with pytest.raises(LabError, match="--only: no case 'nope' in "):
        cases(CORPUS, "nope")
    with pytest.raises(LabError, match="no case there"):
        cases(tmp_path, None)
