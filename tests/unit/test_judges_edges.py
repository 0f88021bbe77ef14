"""The drills' bounds at their exact edges, on recorded runs (tests/unit/drill_cases.py) with one
time moved by hand: the partition's timeout window, a mismatch that must fail in under half the
timeout, a preempted node gone within its grace. The recorded runs sit well inside each bound;
mutation testing showed no test held the edges (docs/mutation.md). No process runs."""

from __future__ import annotations

import pytest
from drill_cases import failed, judge, seen

from lab.exercises import collective_mismatch, partition_node, preempt
from lab.health.events import AgentEvent

TIMEOUT = partition_node.PG_TIMEOUT_S
STORE_SIDE = f"the side still holding the store failed at the {TIMEOUT} s process-group timeout"
CUT_SIDE = "the cut-off side failed no sooner than the timeout"


def partitioned(store_side_s: float, cut_side_s: float | None):
    """The recorded partition, each side's agent seeing the failure that many seconds in."""
    evidence = seen("partition-node")
    fault = evidence.injected("partition")
    after = {"node0": store_side_s, "node1": cut_side_s}
    evidence.agents = [a for a in evidence.agents if a["name"] != AgentEvent.FAILURE_DETECTED] + [
        {"time": fault["time"] + s, "node": n, "name": AgentEvent.FAILURE_DETECTED, "message": "", "event": {}}
        for n, s in after.items()
        if s is not None
    ]
    return judge("partition-node", evidence)


@pytest.mark.parametrize(
    ("store_side_s", "cut_side_s", "failing"),
    [
        (TIMEOUT - 1, TIMEOUT - 1, []),  # the earliest each side may see it
        (TIMEOUT + 10, 27.0, []),  # the latest the connected side may
        (TIMEOUT - 1.02, 27.0, [STORE_SIDE]),
        (TIMEOUT + 10.02, 27.0, [STORE_SIDE]),
        (10.5, TIMEOUT - 1.02, [CUT_SIDE]),
        (10.5, None, [CUT_SIDE]),  # the cut-off side never saw it
    ],
)
def test_a_partition_is_judged_by_when_each_side_saw_it(store_side_s, cut_side_s, failing):
    assert failed(partitioned(store_side_s, cut_side_s)) == failing


def test_a_partition_reports_each_sides_seconds_to_the_hundredth():
    report = partitioned(8.996, 27.0)  # 9.00 to the hundredth: at the edge, in
    assert report.facts["failure_detected_after_s"] == {"node0": 9.0, "node1": 27.0}
    assert report.checks[1].detail == "node1: 27.0 s"
    assert report.explanation.endswith("its agent saw the failure after 27.0 s against [9.0] s on the connected side.")
    assert report.facts["errors_seen"] == [
        "Timed out waiting 10000ms for recv operation to complete",
        "Timed out waiting 10000ms for send operation to complete",
    ]


def test_a_mismatch_must_fail_in_under_half_the_timeout():
    evidence = seen("collective-mismatch")
    fault = evidence.injected("kill_worker")
    errors = [e for e in evidence.events if e["event"] == "exit" and e.get("reason") == "error"]
    fast = f"it failed fast, not at the {collective_mismatch.PG_TIMEOUT_S} s timeout"
    for e in errors:
        e["time"] = fault["time"] + collective_mismatch.PG_TIMEOUT_S / 2
    assert failed(judge("collective-mismatch", evidence)) == [fast]
    errors[0]["time"] -= 0.5  # the first error counts
    report = judge("collective-mismatch", evidence)
    assert failed(report) == [] and report.facts["seconds_to_failure"] == collective_mismatch.PG_TIMEOUT_S / 2 - 0.5


def test_a_preempted_node_must_be_gone_within_its_grace():
    evidence = seen("preempt")
    evidence.extra["gone_after_s"] = preempt.GRACE_S
    grace = f"{evidence.extra['preempted']} was gone within the {preempt.GRACE_S:g} s grace period"
    assert failed(judge("preempt", evidence)) == [grace]
    assert judge("preempt", evidence).checks[0].detail == f"{preempt.GRACE_S:.2f} s"


@pytest.mark.parametrize(
    ("handed_step", "lost", "failing"), [(24, 1, []), (23, 2, ["lost at most the step in flight"])]
)
def test_an_in_process_recovery_may_redo_the_step_in_flight_and_no_more(handed_step, lost, failing):
    """Step 25 was reached before the kill; the peers hand over the state of an earlier step."""
    evidence = seen("kill-worker-in-process")
    for e in evidence.events:
        if e["event"] == "state_from_peer":
            e["step"] = handed_step
    report = judge("kill-worker-in-process", evidence)
    assert report.facts["lost_steps"] == lost and failed(report) == failing
