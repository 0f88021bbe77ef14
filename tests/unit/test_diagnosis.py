"""`lab why` graded (lab.bench.grading) on cells of `lab bench diagnosis` recorded from real runs
(tests/fixtures/diagnosis/: each folder is the evidence a cell's card was drawn from, and its
truth.json what the bench did: which signal, to which rank, after which step; kernel.log the
kernel's line when it OOM-killed the rank; recorded by scripts/record-fixtures.sh), and the
grading rules on cards made here. The kernel log is given: the test machine's own never
decides a grade."""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path

import pytest

from lab.bench import diagnosis
from lab.bench.diagnosis import listed, paired, steps_list
from lab.bench.diagnosis_cell import Cell
from lab.bench.diagnosis_table import table
from lab.bench.grading import FAULTS, Grade, Named, grade, kind_of, named
from lab.errors import LabError
from lab.health.stragglers import SlowNetwork, Straggler
from lab.why import card as why
from lab.why.failure_card import Card, RankFailure

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnosis"
CELLS = sorted(p.parent for p in FIXTURES.glob("*/truth.json"))
BY_NAME = {f.name: f for f in FAULTS}


def test_every_fault_class_is_recorded_on_both_targets():
    truths = [json.loads((c / "truth.json").read_text()) for c in CELLS]
    recorded = {(truth["target"], truth["fault"]) for truth in truths}
    every = {(target, f.name) for target in ("trainer", "script") for f in FAULTS}
    assert recorded >= {(target, name) for target, name in every if target == "trainer" or not BY_NAME[name].no_script}


@pytest.mark.parametrize("cell", CELLS, ids=[c.name for c in CELLS])
def test_the_card_still_names_the_injected_rank_class_and_step_on_the_cells_it_was_tuned_on(cell):
    """A regression check, not a validation: the card was changed until these recorded cells came
    out right. Its score on failures it was not tuned on is graded in test_natural_failures.py
    (held-out cases, kept out of the tuning)."""
    truth = json.loads((cell / "truth.json").read_text())
    kernel = cell / "kernel.log"  # the kernel's line on an OOM-killed rank, kept when recorded
    card = why.card(cell, kernel=lambda: kernel.read_text() if kernel.exists() else "")
    fault = BY_NAME[truth["fault"]]
    result = grade(truth["target"], fault, truth["rank"], truth["step"], card)
    assert result.right and result.step_ok, card.text()
    if not fault.settled:  # no rank with confidence, and the class in the first failure's own words
        assert result.named_rank is None and result.named_kind == fault.expect, card.text()


def failure(rank: int, how: str, *, consequence: bool = False, step: int | None = 5) -> RankFailure:
    found = RankFailure(rank, "node0", rank, 0.0, 1, how=how, consequence=consequence)
    found.last_step = step
    return found


@pytest.mark.parametrize(
    ("how", "kind"),
    [
        ("killed by SIGKILL", "killed"),
        ("killed by the kernel's OOM killer (SIGKILL)", "oom"),
        ("killed by SIGSEGV", "crashed"),
        ("killed by SIGABRT", "crashed"),
        ("killed by SIGTERM", "terminated"),
        ("stopped on SIGTERM (a preemption), after a checkpoint", "terminated"),
        ("raised ValueError", "exception"),
        ("raised FloatingPointError", "diverged"),
        ("ran a different collective than its peers (ALLREDUCE #14 [3] where they ran ...)", "mismatch"),
        ("exited with status 3", "exited"),
        ("failed", "unknown"),
    ],
)
def test_the_class_a_card_names(how, kind):
    assert kind_of(how) == kind


def test_a_card_names_no_rank_when_it_only_saw_consequences_or_cannot_order_the_exits():
    peer_lost = Card(first=failure(2, "raised RuntimeError", consequence=True))
    assert named(peer_lost).rank is None and named(peer_lost).kind == "unknown"
    unordered = Card(first=failure(1, "exited with status 1"), certain=False)
    assert named(unordered).rank is None
    hung = Card(first=failure(3, "killed by SIGKILL", consequence=True), notes=[f"rank 3 ... {'the likely hung rank'}"])
    assert named(hung) == named(hung).__class__(3, "hung", 5)
    assert named(Card(first=None)).rank is None


def test_unknown_is_not_a_wrong_rank_but_another_named_rank_is():
    kill = BY_NAME["kill"]
    unknown = grade("trainer", kill, 1, 5, Card(first=failure(2, "raised X", consequence=True)))
    assert not unknown.right and not unknown.wrong_rank
    wrong = grade("trainer", kill, 1, 5, Card(first=failure(2, "killed by SIGKILL")))
    assert wrong.wrong_rank and not wrong.right
    right = grade("trainer", kill, 2, 5, Card(first=failure(2, "killed by SIGKILL", step=6)))
    assert right.right and right.step_ok  # the step in flight when the signal landed
    late = grade("trainer", kill, 2, 5, Card(first=failure(2, "killed by SIGKILL", step=7)))
    assert late.right and not late.step_ok


def test_two_bare_exits_leave_the_first_unknown(tmp_path):
    """Agents notice exits in their own time: two ranks that exited 1 without an error of their
    own cannot be ordered, and the card says so rather than naming the one noticed first."""
    (tmp_path / "events").mkdir()
    for node, rank, noticed in (("node0", 0, 10.0), ("node1", 3, 10.4)):
        record = {"name": "lab.failure_detected", "state": "FAILED", "exit_codes": {str(rank): 1}}
        record["failures"] = {str(rank): {"local_rank": rank % 2, "pid": 100 + rank, "exitcode": 1}}
        line = {"time": noticed, "node": node, "torchelastic": record}
        (tmp_path / "events" / f"agent-{node}.jsonl").write_text(json.dumps(line) + "\n")
    card = why.card(tmp_path, kernel=lambda: "")
    assert not card.certain and named(card).rank is None
    assert "ranks 0, 3 exited without saying why" in card.text()


def test_the_table_fails_its_goals_on_a_wrong_rank_and_lists_the_miss():
    cells = [
        Grade("trainer", "kill", 1, 5, 1, "killed", 5, "killed"),
        Grade("script", "kill", 3, 5, 0, "killed", 5, "killed"),
    ]
    lines = table(cells, [BY_NAME["kill"]], "loopback", 1.0)
    assert any(line.startswith("| **all** | 2 | 1 | 2 | 2 | 0 | 1 | 50% |") for line in lines), lines
    assert "- Goal: 0 cells with a wrong rank named: **missed** (1)" in lines
    assert "- script, kill at rank 3 after step 5 -> rank 0, killed, step 5" in lines


def test_each_fault_is_a_real_signal_or_a_node_fault_with_a_distinct_name():
    assert len({f.name for f in FAULTS}) == len(FAULTS)
    not_a_signal = [f for f in FAULTS if f.cuts_node or f.kills_store or f.resumes]
    assert all(f.signal in signal.valid_signals() for f in FAULTS if f not in not_a_signal)
    assert all(f.signal == 0 for f in not_a_signal)
    assert all(f.needs_hosts == "netns" for f in FAULTS if f.cuts_node)  # iptables in the node's own netns


def test_positions_take_the_steps_in_turn():
    assert paired(["first", "middle", "last"], [6, 10, 14]) == [("first", 6), ("middle", 10), ("last", 14)]
    assert paired(["last"], [5, 9]) == [("last", 5), ("last", 9)]
    assert paired(["first", "last"], [7]) == [("first", 7), ("last", 7)]


@pytest.mark.parametrize(
    ("parse", "text", "words"),
    [
        (steps_list, "0", ["--at-steps", "steps from 1 to 199", "'0'"]),
        (steps_list, "3,x", ["--at-steps", "'3,x'"]),
        (steps_list, "200", ["--at-steps", "'200'"]),
        (listed("--positions", ("first", "middle", "last")), "", ["--positions", "first, middle, last"]),
        (listed("--targets", ("trainer", "script")), "trainer,gpu", ["--targets", "'trainer,gpu'"]),
    ],
)
def test_a_bad_list_is_refused_naming_its_flag_and_the_choices(parse, text, words):
    with pytest.raises(ValueError) as refused:
        parse(text)
    assert all(word in str(refused.value) for word in words), refused.value
    assert steps_list(" 6, 10 ") == [6, 10] and listed("--targets", ("trainer", "script"))("script") == ["script"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"hosts": "userns"}, ["--hosts", "loopback or netns", "userns"]),
        ({"side_by_side": 0}, ["--side-by-side", "at least 1"]),
        ({"classes": "kill,nosuch"}, ["--classes", "'kill,nosuch'"]),
    ],
)
def test_the_bench_refuses_before_it_starts_anything(tmp_path, change, words):
    args = {"hosts": "loopback", "classes": "kill", "positions": "last", "at_steps": "6", "targets": "script"}
    args |= {"side_by_side": 1, "keep": ""} | change
    with pytest.raises(LabError) as refused:
        diagnosis.run(argparse.Namespace(**args), tmp_path)
    assert all(word in str(refused.value) for word in words), refused.value
    assert list(tmp_path.iterdir()) == []


def test_a_fault_an_unchanged_script_cannot_take_is_refused_there_only():
    trainer_only = [BY_NAME[name] for name in ("nan", "slow", "mismatch", "mismatch-no-detail")]
    for fault in trainer_only:
        assert diagnosis.refuses(Cell("script", fault, 1, 6))
        assert not diagnosis.refuses(Cell("trainer", fault, 1, 6))
    others = [f for f in FAULTS if f not in trainer_only]
    assert not any(diagnosis.refuses(Cell("script", f, 1, 6), "netns") for f in others)
    nan = BY_NAME["nan"]
    lines = table([], [nan], "loopback", 0.1, refused=[("script", "nan", nan.no_script)])
    assert f"- nan on the script: {nan.no_script}" in lines


def test_a_poisoned_loss_is_nan_once_and_the_trainers_check_names_the_rank_and_step():
    import torch

    from lab.health import injected_error
    from lab.workloads.distributed import finite

    one = torch.tensor(1.0)
    injected_error.poison_next_loss(0, None)
    assert torch.isnan(injected_error.poisoned(one)) and injected_error.poisoned(one) is one
    with pytest.raises(FloatingPointError, match="rank 3: the loss is nan at step 12"):
        finite(torch.tensor(float("nan")), 3, 12)
    assert finite(one, 3, 12) is one


def test_a_straggler_is_named_only_when_nothing_failed():
    """The straggler line names the slowed rank as "slow"; a failure on the same card comes first."""
    slow = Straggler(rank=3, step=12, score=9.0, busy_s=0.25, others_s=0.002, scores={3: 9.0}, since=8)
    assert named(Card(first=None, straggler=slow)) == Named(3, "slow", 8)
    failed = RankFailure(1, "node0", 1, 0.0, -9, pid=7, how="killed by SIGKILL", last_step=14)
    assert named(Card(first=failed, straggler=slow)) == Named(1, "killed", 14)
    graded = grade("trainer", BY_NAME["slow"], 3, 6, Card(first=None, straggler=slow))
    assert graded.right and graded.step_ok  # slow from two steps after the one read: in time
    assert not grade("trainer", BY_NAME["slow"], 3, 5, Card(first=None, straggler=slow)).step_ok


def test_a_rank_that_raised_its_own_error_and_was_then_stopped_by_torchrun_is_the_cause():
    """Measured once in `lab bench diagnosis` (trainer, exception at rank 2): the rank raised the
    injected exception, hung on its way out, and its agent SIGKILLed it after the peers had timed
    out waiting for it. Its own error makes it the cause; the peers' timeouts do not."""
    raised = RankFailure(2, "node1", 0, 5.0, -9, pid=7, error="RuntimeError: rank 2: exception injected by the lab")
    how, consequence = why.how_it_failed(raised, terminated={7})
    assert not consequence and kind_of(how) == "exception"
    assert how == "raised RuntimeError, then was killed by SIGKILL from torchrun's agent, stopping the group"
    timed_out = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 8000ms for recv"
    peer = RankFailure(1, "node0", 1, 0.0, 1, pid=8, error=timed_out)
    assert why.how_it_failed(peer, terminated={7}) == ("raised RuntimeError", True)
    stopped = RankFailure(3, "node1", 1, 5.0, -15, pid=9)
    assert why.how_it_failed(stopped, terminated={9}) == (
        "killed by SIGTERM from torchrun's agent, stopping the group",
        True,
    )


def test_where_the_evidence_cannot_settle_the_rank_only_a_card_that_names_none_is_right():
    """mismatch-no-detail: gloo aborts the odd rank or the one its data went to. A card naming the
    injected rank with confidence got lucky, and is graded as not right; one naming none, with the
    class, is right; one naming none with another class is not."""
    fault = BY_NAME["mismatch-no-detail"]
    aborted = failure(
        2, "killed by SIGABRT: gloo received more data than its collective expects (a collective mismatch)"
    )
    sure = grade("trainer", fault, 2, 5, Card(first=aborted))
    assert sure.named_rank == 2 and not sure.right
    unsure = grade("trainer", fault, 2, 5, Card(first=aborted, certain=False))
    assert unsure.named_rank is None and unsure.named_kind == "mismatch" and unsure.right
    crashed = grade("trainer", fault, 2, 5, Card(first=failure(2, "killed by SIGABRT"), certain=False))
    assert crashed.named_kind == "crashed" and not crashed.right


def cut_off(node: str, ranks: list[int], cut: bool = True) -> SlowNetwork:
    rtt = 2.0 if cut else 0.3
    return SlowNetwork(node, ranks, 12, rtt / 0.001, rtt, 0.001, {node: rtt, "node0": 0.001}, cut)


def test_a_cut_node_is_named_by_its_ranks_when_no_rank_failed_of_its_own():
    fault = BY_NAME["partition"]
    timed_out = failure(0, "raised RuntimeError", consequence=True)
    card = Card(first=timed_out, certain=False, slow_network=cut_off("node1", [2, 3]))
    assert named(card) == Named(None, "partition", 12, (2, 3))
    assert grade("trainer", fault, 3, 11, card).right  # any rank of the cut node
    wrong = grade("trainer", fault, 0, 11, card)
    assert wrong.wrong_rank and not wrong.right and not wrong.unknown
    slow = Card(first=timed_out, certain=False, slow_network=cut_off("node1", [2, 3], cut=False))
    assert named(slow).kind == "unknown"  # a slow link is not a cut one
    killed = Card(first=failure(2, "killed by SIGKILL"), slow_network=cut_off("node1", [2, 3]))
    assert named(killed) == Named(2, "killed", 5)  # a rank that failed of its own comes first


def test_a_node_fault_is_refused_where_the_hosts_cannot_take_it():
    cell = Cell("trainer", BY_NAME["partition"], 2, 6)
    assert "needs netns hosts" in diagnosis.refusal(cell, "loopback") and not diagnosis.refusal(cell, "netns")


def test_of_two_silent_ranks_the_one_that_outlived_its_sigterm_is_the_hung_one():
    """Measured once in 84 cells: a peer stopped by its agent a moment before its own timeout fired
    raised nothing either. The SIGSTOPped rank took the SIGKILL after the SIGTERM; a GIL-hung one
    dies of the SIGTERM, like the peer: then which one hung is unknown, and the card says so."""
    peer = RankFailure(1, "node0", 1, 1.0, -signal.SIGTERM, pid=11)
    frozen = RankFailure(2, "node1", 0, 1.2, -signal.SIGKILL, pid=12)
    assert why.hung_ranks([peer, frozen]) == [frozen]
    gil_hung = RankFailure(2, "node1", 0, 1.2, -signal.SIGTERM, pid=12)
    assert why.hung_ranks([peer, gil_hung]) == [peer, gil_hung]
    assert why.hung_ranks([gil_hung]) == [gil_hung]
