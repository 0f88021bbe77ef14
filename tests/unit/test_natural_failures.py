"""The card on failures as ordinary scripts have them (tests/user_scripts/natural/), not through
the lab's injection hooks: each recorded with `lab run --hosts loopback --nodes 1
--nproc-per-node 2 SCRIPT` (its kept evidence in tests/fixtures/natural/NAME, the truth beside it).

Graded strictly (lab.bench.grading.named: only what the card states). The tuning half is what the
card was changed against (uneven inputs, every rank diverging, a syntax error); the held-out
half was recorded after those changes and graded before any change: its score is the honest one,
and its miss stays visible here, marked, rather than tuned away."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.bench.grading import named
from lab.why import card as why

CELLS = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "natural").iterdir())
# Held-out cells the card gets wrong today: the grade says so; a fix flips it. Graded before any
# change, the second held-out half scored 12 of 14; cuda_oom_message (an exception, not out of
# memory) and dataloader_timeout (its own timeout taken for a peer's) were then fixed for their
# class (lab.why.card.OUT_OF_MEMORY, lab.node_log.COMMUNICATION_TIMEOUT): docs/benchmarks.md keeps both scores.
KNOWN_MISSES = {
    "traceback_then_hard_exit": "held out, and still missed after the printed-error fixes: both ranks leave with "
    "os._exit(2) on their own, one printing JSONDecodeError, the other a peer's reset connection, neither with a "
    "rank; the card says one of ranks 0, 1 exited, not which raised (in 1 of 3 recordings torchrun stopped rank 0 "
    "first, and the card named rank 1's JSONDecodeError)",
    "early_return": "names rank 0, right, but as hung: it returned, then hung in destroy_process_group (the kept "
    "evidence holds no stack to show it left its loop)",
}


def graded(cell: Path) -> tuple[dict, object, bool]:
    truth = json.loads((cell / "truth.json").read_text())
    card = why.card(cell, kernel=lambda: "")
    said = named(card)
    return truth, card, said.rank == truth["rank"] and said.kind == truth["kind"]


@pytest.mark.parametrize("cell", CELLS, ids=[c.name for c in CELLS])
def test_the_card_on_a_natural_failure(cell):
    truth, card, right = graded(cell)
    if cell.name in KNOWN_MISSES:
        assert not right, f"{cell.name} is right now: take it out of KNOWN_MISSES"
    else:
        assert right, f"{truth['says']}\n{card.text()}"
    if truth["rank"] is None:  # no rank failed first: the card's first words say it is not certain
        assert card.text().startswith(("first failure: one of ranks", "first failure: not certain which rank"))


def test_the_halves_are_kept_apart_and_scored():
    halves: dict[str, list[bool]] = {}
    for cell in CELLS:
        truth, _, right = graded(cell)
        halves.setdefault(truth["half"], []).append(right)
    assert set(halves) == {"tuning", "held-out"} and len(halves["held-out"]) >= 17
    assert all(halves["tuning"]) and sum(halves["held-out"]) == len(halves["held-out"]) - len(KNOWN_MISSES)


def test_an_error_raised_inside_the_standard_library_is_placed_at_the_scripts_own_line():
    """Held out, then fixed: the card placed rank 1's ModuleNotFoundError in importlib."""
    card = why.card(next(c for c in CELLS if c.name == "import_on_one_rank"), kernel=lambda: "")
    assert card.first is not None and card.first.where.endswith("import_on_one_rank.py:17")


def test_a_syntax_error_is_quoted_with_its_line():
    card = why.card(next(c for c in CELLS if c.name == "syntax_error"), kernel=lambda: "")
    assert card.first is not None and card.first.error == "SyntaxError: '(' was never closed"
    assert card.first.where.endswith("syntax_error.py:10")


@pytest.mark.parametrize("signal_code", [-6, -11])
@pytest.mark.parametrize("which", [["1"], ["0", "1"]])
def test_a_rank_that_raised_and_then_died_of_a_signal_on_its_way_out_is_named_for_its_exception(
    tmp_path, signal_code, which
):
    """Live, every rank diverging was once graded a native crash: rank 1 raised FloatingPointError
    and then ended in SIGABRT (an uncaught exception with gloo's threads still running). The same
    recorded evidence with the raising ranks' exits turned into SIGABRT or SIGSEGV: still diverged."""
    import shutil

    cell = tmp_path / "cell"
    shutil.copytree(next(c for c in CELLS if c.name == "every_rank_diverges"), cell)
    events = cell / "events" / "agent-node0.jsonl"
    records = [json.loads(line) for line in events.read_text().splitlines()]
    for record in records:
        detected = record["torchelastic"]
        if detected.get("name") == "lab.failure_detected":
            for rank in which:
                detected["exit_codes"][rank] = signal_code
                detected["failures"][rank]["exitcode"] = signal_code
    events.write_text("".join(json.dumps(r) + "\n" for r in records))
    card = why.card(cell, kernel=lambda: "")
    said = named(card)
    assert card.first is not None and "raised FloatingPointError" in card.first.how, card.text()
    assert (said.rank, said.kind) == (None, "diverged"), card.text()
