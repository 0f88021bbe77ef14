"""The odd rank of a collective mismatch (lab.why.mismatch), from the errors ranks die of under
TORCH_DISTRIBUTED_DEBUG=DETAIL. The errors are the ones real ranks printed in a recorded cell
of `lab bench diagnosis` (tests/fixtures/diagnosis/trainer-mismatch-r2-s6: rank 2 issued one
extra all-reduce); the cases where the reports do not agree are made from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_commands import quotes

from lab.bench.grading import named
from lab.why import card as why
from lab.why.failure_card import Card, RankFailure
from lab.why.mismatch import DETECTED, odd_rank

CELL = Path(__file__).resolve().parents[1] / "fixtures" / "diagnosis" / "trainer-mismatch-r2-s6"


def recorded_errors() -> dict[int, str]:
    """rank -> the mismatch error it died of, as the card reads it (the agents' records of their
    ranks' error files)."""
    failures = why.reported_failures(why.read_evidence(CELL))
    return {f.rank: f.error for f in failures if DETECTED.search(f.error)}


def naming(error: str, rank: int, named: int) -> str:
    """The same error as rank `rank` would print it, naming `named`."""
    error = re.sub(r"Rank \d+ is running collective: C", f"Rank {rank} is running collective: C", error, count=1)
    return re.sub(r"but Rank \d+ is running", f"but Rank {named} is running", error)


def test_the_rank_its_peers_name_is_the_odd_one_and_what_it_ran_is_its_own_word():
    errors = recorded_errors()
    assert {0, 3} <= set(errors), errors.keys()  # its peers on both nodes reported it
    found = odd_rank(errors)
    assert found is not None and found.rank == 2 and {0, 3} <= set(found.named_by) and 2 not in found.named_by
    assert found.ran == "ALLREDUCE #14 [3]" and found.others_ran == "ALLREDUCE #14 [1, 16]"
    card = why.card(CELL, kernel=lambda: "")
    assert card.first is not None and card.first.rank == 2 and card.first.how == found.how()
    assert all(other.consequence for other in card.then)


def test_without_the_odd_ranks_own_report_its_peers_still_name_it():
    errors = {rank: error for rank, error in recorded_errors().items() if rank != 2}
    found = odd_rank(errors)
    assert found is not None and found.rank == 2 and found.ran == ""
    assert found.how().startswith("ran a different collective than its peers (they ran ALLREDUCE #14 [1, 16]; named")


@pytest.mark.parametrize(
    "said",
    [
        {0: 1, 1: 0},  # two ranks, each naming the other: either could be odd
        {0: 1},  # one report
        {0: 2, 1: 2, 2: 0, 3: 0},  # a tie
    ],
    ids=["two-ranks", "one-report", "tie"],
)
def test_reports_that_do_not_agree_name_no_rank(said):
    error = next(iter(recorded_errors().values()))
    assert odd_rank({rank: naming(error, rank, named) for rank, named in said.items()}) is None


def test_errors_that_are_not_a_mismatch_name_no_rank():
    assert odd_rank({0: "RuntimeError: Connection closed by peer", 1: "", 2: "Detected mismatch"}) is None


def test_the_card_docs_exercises_md_quotes_is_the_one_lab_why_draws_from_the_cell():
    quoted = next(q for q in quotes("docs/exercises.md") if "ran a different collective" in q)
    drawn = why.card(CELL, kernel=lambda: "").text().splitlines()
    assert quoted.splitlines() and all(line in drawn for line in quoted.splitlines()), drawn


def test_a_card_whose_mismatch_reports_do_not_agree_names_no_rank():
    """As measured once in `lab bench diagnosis` (rank 2 odd, rank 0 and rank 2 the only reports,
    naming each other; ranks 1 and 3 stopped by their agents first): the earliest report is not
    the cause: no rank is named with confidence, and the class is only what the card's first line
    says (strict grading: "raised RuntimeError", an exception, not the mismatch it did not settle)."""
    error = next(iter(recorded_errors().values()))
    failures = [
        RankFailure(2, "node1", 0, 1.0, 1, error=naming(error, 2, 0), how="raised RuntimeError"),
        RankFailure(0, "node0", 0, 1.3, 1, error=naming(error, 0, 2), how="raised RuntimeError"),
    ]
    card = Card(first=None)
    assert not why.settled_by_a_mismatch(card, failures)
    assert card.certain is False and "do not agree on which rank ran a different collective" in card.notes[0]
    card.first = failures[0]
    assert named(card).rank is None and named(card).kind == "exception"
    assert card.text().startswith("first failure: not certain which rank; seen first: rank 2 on node1")
    card.then = [failures[1]]
    assert card.text().startswith("first failure: one of ranks 0, 2, which first is unknown; seen first: rank 2")
