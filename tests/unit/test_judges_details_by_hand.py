"""The facts and details of collective-mismatch, straggler, rank-exception, partition-node and
crash-loop, on their recorded runs (tests/unit/drill_cases.py) with one thing set by hand, or
on runs written by hand (tests/unit/drill_runs.py): each value worked out beside the run. The
tests that compare which checks fail left these unread (docs/mutation.md). No process runs."""

from __future__ import annotations

from drill_cases import after_fault, judge, seen
from drill_runs import FAULT, rec, seen_of

from lab.exercises import DrillOptions, collective_mismatch, straggler
from lab.report import Check
from lab.topology import Topology

MISMATCH_LINE = "Detected mismatch between collectives on ranks. Rank 1 is running collective: " + "y" * 400
FAST = f"it failed fast, not at the {collective_mismatch.PG_TIMEOUT_S} s timeout"


def mismatch(first_error_after: float | None, extra_collective: bool = True):
    """The recorded mismatch, its first error exit `first_error_after` s after the injection (no
    error exit at all for None), a rank of an earlier group that completed before it, its log line."""
    evidence = seen("collective-mismatch")
    at = after_fault(evidence, "kill_worker")
    errors = [e for e in evidence.events if e["event"] == "exit" and e.get("reason") == "error"]
    if first_error_after is None:
        evidence.events = [e for e in evidence.events if e not in errors]
    else:
        for e in errors:
            e["time"] = at + first_error_after + 0.25 * e["rank"]
    evidence.events.insert(0, rec(at - 30.0, "exit", 3, reason="completed", step=60, checksum="c"))
    if not extra_collective:
        evidence.events = [e for e in evidence.events if e["event"] != "injected_extra_collective"]
    evidence.logs = {"node0": "start\n", "node1": f"[rank1]: RuntimeError: {MISMATCH_LINE}\nnext line\n"}
    return judge("collective-mismatch", evidence)


def test_a_mismatch_reports_when_its_first_error_came_and_quotes_the_error():
    report = mismatch(1.5)
    assert report.facts == {"seconds_to_failure": 1.5, "restarts": 0}
    assert report.checks[2] == Check("the error names the mismatch", True, MISMATCH_LINE[:300])
    assert report.checks[3] == Check(FAST, True, "1.5 s after the injection")


def test_a_mismatch_with_no_error_exit_or_no_extra_collective_says_so():
    report = mismatch(None)
    assert report.facts["seconds_to_failure"] is None
    assert report.checks[3] == Check(FAST, False, "0.0 s after the injection")
    assert report.checks[0] == Check("the injected collective ran", True, "")
    assert not mismatch(1.5, extra_collective=False).checks[0].ok
    unnamed = mismatch(1.5)
    unnamed.evidence.logs = {"node1": "RuntimeError: Timed out\n"}
    assert judge("collective-mismatch", unnamed.evidence).checks[2] == Check(
        "the error names the mismatch", False, "no such error"
    )


def straggled(other_steps: int):
    """2 ranks at 4 steps/s for the 5 s before a slowdown at 10 s; from one period in to the alert
    17 s later (16 s), rank 1 (slowed) takes 16 steps, rank 0 `other_steps`."""
    fired_at = FAULT + 17.0
    events = [rec(t, "step", r, step=s) for r in (0, 1) for t, s in ((5.0, 20), (10.0, 40))]
    events += [rec(FAULT + 1.0, "step", r, step=44) for r in (0, 1)]
    events += [rec(fired_at, "step", 1, step=60), rec(fired_at, "step", 0, step=44 + other_steps)]
    fault = {"fault": "slow_worker", "node": "node1", "time": FAULT, "args": {}, "result": None, "rank": 1}
    extra = {"fired_at": fired_at, "firing": [{"labels": {"rank": "1"}}], "busy": {"0": 0.25, "1": 0.75}}
    topology = Topology(nodes=2, nproc_per_node=1, rdzv_backend="lab")
    return straggler.judge(
        seen_of("straggler", topology, [fault], events, extra=extra), DrillOptions(target_rank=1, at_step=25)
    )


def test_a_straggler_reports_the_rates_on_each_side_of_the_slowdown_and_when_the_alert_fired():
    report = straggled(18)  # 2 steps apart over the 16 s window: the lockstep's edge, in
    assert report.facts == {
        "restarts": 0,
        "step_rate_before": {0: 4.0, 1: 4.0},
        "step_rate_after": {0: 1.125, 1: 1.0},
        "busy_seconds_per_step": {0: 0.25, 1: 0.75},
        "alert_fired_after_s": 17.0,
    }
    assert report.checks == [
        Check("every rank slowed down together", True, "steps/s before {0: 4.00, 1: 4.00}, after {0: 1.12, 1: 1.00}"),
        Check("LabStraggler fired for the slowed rank only", True, "firing for ranks [1] after 17 s"),
        Check(
            "the slowed rank is the busiest outside the all-reduce", True, "busy seconds per step {0: 0.25, 1: 0.75}"
        ),
    ]
    assert not straggled(19).checks[0].ok  # past two steps apart over the window


RAISED = "rank-exception"
INJECTED = "RuntimeError: rank 1: exception injected by the lab's rank-exception drill"


def raised(*records: dict):
    """The recorded rank-exception run, with records added before the others."""
    evidence = seen(RAISED)
    evidence.events[:0] = list(records)
    return judge(RAISED, evidence), evidence


def test_rank_exception_reports_the_targets_first_error_after_the_fault():
    report, _ = raised()
    assert report.facts["error"] == INJECTED  # rank 1's exit record, 0.48 s after the fault
    assert report.checks[0] == Check("rank 1 died of the exception, recorded", True, f"its exit record: {INJECTED}")


def test_rank_exception_reads_no_other_ranks_error_and_none_from_before_the_fault():
    _, evidence = raised()
    at = after_fault(evidence, "kill_worker")
    earlier = rec(at - 5.0, "exit", 2, reason="error", error="RuntimeError: an earlier group's")
    at_the_fault = rec(at, "exit", 1, reason="error", error="RuntimeError: at the fault's own instant")
    report, _ = raised(earlier, at_the_fault)
    assert report.checks[0].ok and report.facts["error"] == INJECTED
    evidence = seen(RAISED)
    evidence.events = [e for e in evidence.events if not (e["event"] == "exit" and e["rank"] == 1)]
    report = judge(RAISED, evidence)
    assert report.facts["error"] is None
    assert report.checks[0] == Check(
        "rank 1 died of the exception, recorded", False, "no error exit record from that rank after the fault"
    )


def test_a_partition_quotes_five_errors_at_most_and_two_in_its_detail():
    evidence = seen("partition-node")
    evidence.logs = {"node0": "".join(f"Timed out waiting {n}000ms for recv\n" for n in range(1, 8)), "node1": ""}
    report = judge("partition-node", evidence)
    assert report.facts["errors_seen"] == [f"Timed out waiting {n}000ms for recv" for n in range(1, 6)]
    timeout = next(c for c in report.checks if c.name == "the logs say it was a timeout")
    assert timeout == Check(
        "the logs say it was a timeout", True, "Timed out waiting 1000ms for recv; Timed out waiting 2000ms for recv"
    )
    detected = report.facts["failure_detected_after_s"]
    assert round(report.facts["recovery"]["detect"], 2) == min(detected.values())  # the earliest node's


def test_a_crash_loop_reports_its_budget_and_when_it_stopped():
    evidence = seen("crash-loop")
    evidence.extra["stopped_after_s"] = 4.5
    report = judge("crash-loop", evidence)
    assert report.facts["budget"] == 3 and report.facts["crash_loop_stopped_after_s"] == 4.5
    assert report.explanation.endswith("4.5 s after it was started afresh")
