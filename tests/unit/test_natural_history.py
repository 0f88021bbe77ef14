"""`lab bench natural` keeps every run's scores and misses: a case one run missed stays on the page
after a later run gets it right (issue 55: earlier misses lived only in commit messages)."""

from __future__ import annotations

import json

from lab.bench import natural
from lab.bench.result import BenchResult


def case(name: str, half: str, right: bool) -> dict:
    said = [0, "left"] if right else [0, "hung"]
    return {"case": name, "half": half, "truth": [0, "left"], "said": said, "right": right, "first_line": ""}


def test_a_miss_stays_in_the_history_after_a_later_run_gets_it_right(tmp_path):
    first = [case("early_return", "held-out", False), case("uneven_inputs", "tuning", True)]
    md = ["Measured 2026-12-05 on 2 cores", "", "**tuning**: 1 of 1 right"]
    BenchResult("natural", "lab bench natural", md, figures={"cases": first}).save(tmp_path)  # no history yet
    earlier = natural.earlier_runs(tmp_path / "natural.json")
    assert earlier == [
        {
            "date": "2026-12-05",
            "scores": {"tuning": [1, 1], "held-out": [0, 1]},
            "misses": ["early_return (rank 0, hung)"],
        }
    ]
    second = [case("early_return", "held-out", True), case("uneven_inputs", "tuning", True)]
    history = [*earlier, natural.summary(second, "2026-12-06")]
    BenchResult("natural", "lab bench natural", [], figures={"cases": second, "history": history}).save(tmp_path)
    kept = natural.earlier_runs(tmp_path / "natural.json")
    assert kept == history and kept[-1]["misses"] == []
    table = natural.history_lines(kept)
    assert "| 1 (2026-12-05) | 1 of 1 | 0 of 1 | early_return (rank 0, hung) |" in table
    assert "| 2 (2026-12-06) | 1 of 1 | 1 of 1 | - |" in table


def test_no_earlier_result_is_no_history(tmp_path):
    assert natural.earlier_runs(tmp_path / "natural.json") == []
    (tmp_path / "natural.json").write_text(json.dumps({"name": "natural", "figures": {}}))
    assert natural.earlier_runs(tmp_path / "natural.json") == []
