"""hang-rank's judge on runs written by hand (tests/unit/drill_runs.py), in-process: the keeper
that ended the frozen rank, timed from the freeze, and a rank hung in Python that no keeper can
end, judged on the restart it fell back to. Each fact worked out by hand beside the run; the
recorded runs left them unread (docs/mutation.md). No process runs."""

from __future__ import annotations

import pytest
from drill_runs import FAULT, FOUND, FREEZE, agent, finished, rec, seen_of

from lab.exercises import DrillOptions, hang_rank
from lab.health.events import AgentEvent
from lab.report import Check
from lab.topology import Topology

TIMEOUT = hang_rank.PG_TIMEOUT_S


def judged(seen):
    return hang_rank.judge(seen, DrillOptions(target_rank=1, at_step=25))


IN_PROCESS = Topology(nodes=2, nproc_per_node=2, in_process=True)


def keeper_run(frozen: list[dict]):
    """In-process: the keeper's records after the freeze, and the spare's handover."""
    events = [
        rec(9.0, "step", step=25),
        rec(FAULT + 3.5, "collective_failed", 0, step=25),
        rec(FAULT + 3.75, "rendezvous_done", 1, 1),
        rec(FAULT + 4.0, "state_from_peer", 1, 1, step=25, source=0),
        rec(FAULT + 4.25, "step", 0, step=26),
        *finished(FAULT + 20.0, range(4), restart=0),
    ]
    return seen_of(
        "hang-rank",
        IN_PROCESS,
        [FREEZE],
        events,
        agents=frozen,
        extra={"forensics": FOUND, "prometheus_saw_it_at": FAULT + 1.5},
    )


KEEPER_CHECK = (
    f"its keeper heard no heartbeat for 3.3 s and SIGKILLed the frozen rank, before its peers' {TIMEOUT} s timeout"
)


def test_in_process_the_keepers_kill_is_timed_from_the_freeze_and_names_the_rank():
    report = judged(
        keeper_run(
            [
                agent(FAULT, AgentEvent.RANK_FROZEN, rank=3),  # at the freeze itself: not after it
                agent(FAULT + 0.25, AgentEvent.KEEPER_LOST, node="node1"),  # another record
                agent(FAULT + 3.375, AgentEvent.RANK_FROZEN, rank=1),
            ]
        )
    )
    assert report.facts["seconds_until_the_keeper_ended_it"] == 3.375
    assert report.checks[1] == Check(KEEPER_CHECK, True, "rank 1 ended 3.4 s after the freeze")
    assert "after 3.3 s of silence its keeper SIGKILLed it" in report.explanation


@pytest.mark.parametrize(
    ("frozen", "detail"),
    [
        ([], "no rank was ended"),
        ([agent(FAULT + TIMEOUT, AgentEvent.RANK_FROZEN, rank=1)], f"rank 1 ended {TIMEOUT:.1f} s after the freeze"),
        ([agent(FAULT + 3.5, AgentEvent.RANK_FROZEN, rank=2)], "rank 2 ended 3.5 s after the freeze"),
        # A keeper's record that names no rank ends none that can be named.
        (
            [{"time": FAULT + 3.5, "node": "node0", "name": AgentEvent.RANK_FROZEN, "message": "", "event": {}}],
            "rank None ended 3.5 s after the freeze",
        ),
    ],
)
def test_in_process_a_kill_missing_late_or_of_another_rank_fails(frozen, detail):
    assert judged(keeper_run(frozen)).checks[1] == Check(KEEPER_CHECK, False, detail)


PYTHON_CHECK = (
    f"no keeper took rank 1 for frozen (it still beat); its peers' collectives timed out at the {TIMEOUT} s "
    "process-group timeout"
)


def python_hang(asked_after: float | None, frozen: list[dict] | None = None):
    """In Python, in-process: both keepers restart every rank in round 1, `asked_after` s in."""
    asked = (
        []
        if asked_after is None
        else [
            agent(FAULT + asked_after, AgentEvent.GROUP_RESTARTED, node, round=1, why="collective timed out")
            for node in ("node0", "node1")
        ]
    )
    events = [
        rec(9.0, "step", step=25),
        *[rec(FAULT + 12.0, "checkpoint_loaded", r, 1, step=20) for r in range(4)],
        rec(FAULT + 12.25, "rendezvous_done", 0, 1),
        rec(FAULT + 13.0, "step", 0, 1, step=21),
        *finished(FAULT + 20.0, range(4)),
    ]
    extra = {"forensics": {**FOUND, "suspects": [1]}, "prometheus_saw_it_at": None}
    return seen_of("hang-rank", IN_PROCESS, [FREEZE], events, agents=asked + (frozen or []), extra=extra)


@pytest.mark.parametrize(
    ("asked_after", "ok"),
    [(TIMEOUT * 0.9, True), (TIMEOUT * 0.9 - 0.25, False), (TIMEOUT + 14.75, True), (TIMEOUT + 15, False)],
)
def test_a_python_hang_falls_back_between_nine_tenths_of_the_timeout_and_15_s_past_it(asked_after, ok):
    check = judged(python_hang(asked_after)).checks[1]
    assert check == Check(PYTHON_CHECK, ok, f"the restart was asked {asked_after:.1f} s after the hang")


def test_a_python_hang_is_judged_on_the_fallback_it_caused():
    report = judged(python_hang(10.5))
    assert report.facts["fell_back"]["lost_steps"] == 5 and report.facts["recovery"]["total"] == 13.0
    assert "from the checkpoint at step 20, redoing 5 steps. It cost 13.0 s from the hang" in report.explanation
    none = judged(python_hang(None)).checks[1]
    assert none == Check(PYTHON_CHECK, False, "no restart was asked")
    at_the_freeze = [agent(FAULT, AgentEvent.RANK_FROZEN, rank=1)]  # not after it: no keeper took it for frozen
    assert judged(python_hang(10.5, at_the_freeze)).checks[1].ok
    assert not judged(python_hang(10.5, [agent(FAULT + 3.5, AgentEvent.RANK_FROZEN, rank=1)])).checks[1].ok
