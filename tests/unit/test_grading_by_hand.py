"""The grade's reading of a card (lab.bench.grading.named, kind_of, grade) on cards written by
hand: a cut network or a lost store named only when no rank failed of its own and the card is
sure of it, the step it names in each case, a fatal signal outside the crash list. Mutation
testing showed these branches unread (docs/mutation.md). No process runs."""

from __future__ import annotations

import pytest

from lab.bench.grading import FAULTS, HUNG_NOTE, NEVER_FORMED_NOTE, Named, grade, kind_of, named
from lab.health.stragglers import SlowNetwork
from lab.why.failure_card import Card, RankFailure
from lab.why.lost_store import StoreLoss

CUT = SlowNetwork("node1", [2, 3], 14, 9.0, 0.5, 0.01, {"node0": 0.01, "node1": 0.5}, cut=True)
LOST = StoreLoss("connection refused", ["node1"], went_on=False, at_step=12)


def failed(rank: int = 2, how: str = "killed by SIGKILL", *, consequence: bool = False, step: int = 7) -> RankFailure:
    found = RankFailure(rank, "node1", 0, 0.0, 1, how=how, consequence=consequence)
    found.last_step = step
    return found


@pytest.mark.parametrize(
    ("first", "certain", "cut_named"),
    [
        (None, True, True),  # nothing failed of its own: the cut is the finding
        (failed(consequence=True), True, True),  # only a peer's consequence
        (failed(), False, True),  # the card is not sure which rank failed first
        (failed(), True, False),  # a rank failed of its own, and the card is sure: that rank
    ],
)
def test_a_cut_network_is_named_only_where_no_rank_is_surely_the_cause(first, certain, cut_named):
    said = named(Card(first=first, certain=certain, slow_network=CUT))
    assert (said == Named(None, "partition", 14, (2, 3))) is cut_named
    if not cut_named:
        assert said == Named(2, "killed", 7)


@pytest.mark.parametrize(
    ("first", "certain", "store_named"),
    [(None, True, True), (failed(consequence=True), True, True), (failed(), False, True), (failed(), True, False)],
)
def test_a_lost_store_is_named_only_where_no_rank_is_surely_the_cause(first, certain, store_named):
    said = named(Card(first=first, certain=certain, store_loss=LOST))
    assert (said == Named(None, "store-lost", 12)) is store_named


def test_the_step_named_is_the_first_failures_when_no_rank_is():
    never = Card(first=failed(step=9), notes=[f"ranks 0-3 started, {NEVER_FORMED_NOTE}"])
    assert named(never) == Named(None, "cannot-connect", 9)
    consequence = Card(first=failed(how="raised RuntimeError", consequence=True, step=11))
    assert named(consequence) == Named(None, "unknown", 11)
    unsure = Card(first=failed(how="exited with status 1", step=13), certain=False)
    assert named(unsure) == Named(None, "exited", 13)
    unsure_hung = Card(first=failed(step=13), certain=False, notes=[f"rank 2 is {HUNG_NOTE}"])
    assert named(unsure_hung) == Named(None, "hung", 13)


def test_a_fatal_signal_outside_the_crash_list_is_named_by_its_name():
    assert kind_of("killed by SIGUSR1") == "SIGUSR1"
    assert kind_of("killed by SIGBUS") == "crashed"


def test_a_grade_carries_the_target_the_fault_and_what_was_said():
    kill = next(f for f in FAULTS if f.name == "kill")
    graded = grade("script", kill, 2, 6, Card(first=failed(step=7)))
    assert (graded.target, graded.fault, graded.rank, graded.step) == ("script", "kill", 2, 6)
    assert (graded.named_rank, graded.named_kind, graded.named_step) == (2, "killed", 7)
