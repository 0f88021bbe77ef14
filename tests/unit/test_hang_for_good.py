"""A hang nothing in torch would end before --deadline (lab.exercises.script.signals.hang_wait_s):
where every rank's process-group timeout is known (lab.node.user_script.pg_timeout_s records the
one the script gave init_process_group, else torch's default) and longer than the deadline, a
hang-rank drill on a script watches the hang for HUNG_FOR_GOOD_S, not for the deadline, and says why."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path

from lab.exercises.script import judge, signals
from lab.exercises.seen import Seen
from lab.node.user_script import pg_timeout_s

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"


def joined(*timeouts: float | None) -> list[dict]:
    return [
        {"time": 1.0, "event": "rendezvous_done", "rank": rank, **({"pg_timeout_s": t} if t else {})}
        for rank, t in enumerate(timeouts)
    ]


def test_the_timeout_a_script_gave_is_read_by_keyword_or_position_else_torchs_default():
    assert pg_timeout_s((), {"timeout": timedelta(seconds=15)}, "gloo") == 15
    assert pg_timeout_s(("gloo", None, timedelta(minutes=2)), {}, "gloo") == 120
    assert pg_timeout_s(("gloo",), {}, "gloo") == 1800  # torch's default: 30 minutes
    from torch.distributed import constants

    nccl = constants.default_pg_nccl_timeout  # 10 minutes in a build with NCCL; None in the CPU build
    assert pg_timeout_s(("nccl",), {}, "nccl") == (600 if nccl else 1800)


def test_a_hang_past_the_deadline_is_watched_briefly_and_one_the_timeout_ends_for_the_deadline():
    assert signals.hang_wait_s(joined(1800, 1800), 180) == (signals.HUNG_FOR_GOOD_S, 1800)
    assert signals.hang_wait_s(joined(10, 1800), 180) == (180, 10)  # the shortest timeout ends it in time
    assert signals.hang_wait_s(joined(None, None), 180) == (180, None)  # not known: the deadline
    assert signals.hang_wait_s(joined(1800), 5) == (5, 1800)  # a deadline shorter still is kept


def test_the_verdict_on_a_hang_still_running_says_the_timeout_that_would_end_it():
    evidence = copy.deepcopy(Seen.load(FIXTURES / "kind-sparse-hang-rank" / "seen.json"))
    evidence.codes = {node: None for node in evidence.codes}
    evidence.extra.update(waited_s=20.0, pg_timeout_s=1800.0)
    check = next(c for c in judge.judge(evidence).checks if c.name == "the job finished with exit 0")
    assert check.detail == (
        "still running 20 s after the fault, and its process-group timeout is 1800 s: nothing would end the hang "
        "before then (give init_process_group a timeout= shorter than --deadline)"
    )
    del evidence.extra["pg_timeout_s"]
    check = next(c for c in judge.judge(evidence).checks if c.name == "the job finished with exit 0")
    assert check.detail.startswith("still running 20 s after the fault: nothing ended the hang")
