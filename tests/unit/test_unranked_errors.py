"""Errors a node's log holds with no rank, given to the ranks that died without saying why
(lab.why.unranked), only where one reading is possible."""

from __future__ import annotations

from lab.why.failure_card import RankFailure
from lab.why.unranked import aborted_by, mute_ranks_note, printed_by

SYNTAX = ("SyntaxError: invalid syntax", "train.py:5")
CAUSE = ("ValueError: shard 1: batch 4 holds no samples", "train.py:21")
RESET = ("RuntimeError: Read error [127.0.0.1]:2215: Connection reset by peer", "train.py:30")


def failure(rank: int, code: int | None, pid: int, node: str = "node0", error: str = "") -> RankFailure:
    return RankFailure(rank, node, rank % 2, 1.0 + rank, code, pid=pid, error=error)


def given(pairs: list) -> dict[int, tuple[str, str]]:
    return {f.rank: said for f, said in pairs}


def test_one_error_printed_by_every_process_goes_to_each_rank_that_exited_with_a_status_and_no_error():
    failures = [
        failure(0, 1, 10),
        failure(1, 1, 11),
        failure(2, 1, 12, node="node1"),  # another node's
        failure(3, -9, 13),  # killed by a signal: not a status
        failure(4, None, 14),  # no exit seen
        failure(5, 1, 15, error="KeyError: 'lr'"),  # said already
    ]
    other_copy = (SYNTAX[0], "train.py:6")
    assert given(printed_by(failures, "node0", [SYNTAX, other_copy], set())) == {0: SYNTAX, 1: SYNTAX}


def test_one_cause_among_consequences_goes_to_the_one_rank_its_agent_did_not_stop():
    failures = [failure(0, 1, 10), failure(1, 1, 11)]
    assert given(printed_by(failures, "node0", [CAUSE, RESET], terminated={10})) == {1: CAUSE}
    assert given(printed_by(failures, "node0", [RESET, CAUSE], terminated={11})) == {0: CAUSE}


def test_where_the_printed_errors_cannot_say_whose_they_are_nothing_is_given():
    two_unstopped = [failure(0, 2, 10), failure(1, 2, 11)]
    assert printed_by(two_unstopped, "node0", [CAUSE, RESET], set()) == []
    one = [failure(1, 1, 11)]
    assert printed_by(one, "node0", [CAUSE, ("KeyError: 'lr'", "train.py:9")], set()) == []  # two causes
    assert printed_by(one, "node0", [], set()) == []
    assert printed_by([failure(1, 1, 11, error="KeyError: 'lr'")], "node0", [CAUSE], set()) == []


def test_a_native_abort_goes_to_the_nodes_one_rank_killed_by_a_signal_nobody_in_the_job_sent():
    abort = ("gloo::EnforceNotMet: op.preamble.length <= op.nbytes", "train.py:40")
    died, stopped = failure(1, -6, 11), failure(0, -15, 10)
    assert given(aborted_by([died, stopped], "node0", [abort], terminated={10})) == {1: abort}
    assert aborted_by([died, stopped], "node0", [abort], terminated={10, 11}) == []  # the agent's doing
    assert aborted_by([died, failure(3, -6, 13)], "node0", [abort], set()) == []  # two died: whose?
    assert aborted_by([died], "node0", [abort, abort], set()) == []
    assert aborted_by([failure(1, None, 11)], "node0", [abort], set()) == []
    assert aborted_by([failure(1, -6, 11, error="x")], "node0", [abort], set()) == []


def test_ranks_that_all_exited_mute_are_said_with_the_one_cause_their_log_printed_with_no_rank():
    mute = [failure(0, 2, 10), failure(1, 2, 11)]
    assert mute_ranks_note(mute, {"node0": [CAUSE, RESET]}) == (
        "ranks 0, 1 exited with a status, and their log holds, printed with no rank, ValueError: shard 1: batch 4 "
        "holds no samples at train.py:21: one of them raised it; which one, and which failed first, is unknown "
        "(the earliest noticed is shown)"
    )
    other_cause = ("KeyError: 'lr'", "train.py:9")
    for bare in ({}, {"node0": [RESET]}, {"node0": [CAUSE, other_cause]}, {"node1": [CAUSE]}):
        assert mute_ranks_note(mute, bare).startswith("ranks 0, 1 exited without saying why"), bare
