"""kill-rendezvous-host's judge on runs written by hand (tests/unit/drill_runs.py): under c10d the
survivor must fail for want of the store and no group may start again; under etcd-v2 it waits,
the job re-forms and resumes from the newest checkpoint. Each check's detail and fact, worked
out by hand; the recorded runs left them unread (docs/mutation.md). No process runs."""

from __future__ import annotations

import pytest
from drill_runs import FAULT, finished, rec, seen_of

from lab.exercises import DrillOptions, kill_rendezvous_host
from lab.report import Check
from lab.topology import Topology

KILL = {"fault": "kill_node", "node": "node0", "time": FAULT, "args": {}, "result": None, "rank": 0}
MATCHED = "RendezvousConnectionError: " + "x" * 250  # what the drill quotes of the line below
STORE_LINE = f"torch.distributed.elastic.rendezvous.api.{MATCHED}"
C10D = Topology(nodes=2, nproc_per_node=2, max_restarts=1)
SURVIVED = "the surviving node failed too"
STORE = "because it could not reach the rendezvous store"
NO_GROUP = "no worker group ever started again"


def judged(seen):
    return kill_rendezvous_host.judge(seen, DrillOptions(target_rank=0, at_step=25))


def c10d_run(codes=None, logs=None, events=()):
    return seen_of(
        "kill-rendezvous-host",
        C10D,
        [KILL],
        [rec(9.0, "step", step=25), *events],
        codes={"node0": 137, "node1": 1} if codes is None else codes,
        logs={"node1": f"...\n{STORE_LINE}\nmore\n"} if logs is None else logs,
        extra={"survivor": "node1"},
    )


def test_under_c10d_the_survivor_fails_for_want_of_the_store():
    report = judged(c10d_run())
    assert report.facts == {"restarts": 0, "lost_steps": None, "final_weights_match_reference": False}
    assert report.checks == [
        Check(SURVIVED, True, "exit codes {'node0': 137, 'node1': 1}"),
        Check(STORE, True, MATCHED[:200]),  # the first 200 characters of the line, not the line after
        Check(NO_GROUP, True, ""),
    ]


@pytest.mark.parametrize(
    "codes",
    [{"node0": 137, "node1": 0}, {"node0": 137}],  # it succeeded; it never said (no code counts as 0)
)
def test_a_survivor_that_did_not_fail_fails_the_first_check(codes):
    assert judged(c10d_run(codes=codes)).checks[0] == Check(SURVIVED, False, f"exit codes {codes}")


@pytest.mark.parametrize("logs", [{"node1": "Timed out\n"}, {}])  # another error; no log of the survivor
def test_a_survivor_that_failed_for_another_reason_fails_the_second_check(logs):
    assert judged(c10d_run(logs=logs)).checks[1] == Check(STORE, False, "no store error in the log")


def test_only_a_rendezvous_done_in_a_later_group_is_a_group_started_again():
    started = [rec(FAULT + 5.0, "start", 2, 1)]  # a worker began, and never had a group
    assert judged(c10d_run(events=started)).checks[2].ok
    regrouped = [rec(FAULT + 5.5, "rendezvous_done", 2, 1)]
    assert not judged(c10d_run(events=regrouped)).checks[2].ok


ETCD = Topology(nodes=2, nproc_per_node=2, rdzv_backend="etcd-v2")
WAITED = f"the survivor waited in the next round while node0 was down ({kill_rendezvous_host.DOWN_S} s and more)"
RESUMED = "resumed from the newest checkpoint"


def etcd_run(saved=(10, 20), loads=(20,), log="", waiting=True):
    """node0 killed at 10 s and started again 10.5 s later; the job re-forms at 21 s."""
    events = [rec(1.0 + i, "checkpoint_saved", step=s) for i, s in enumerate(saved)]
    events += [rec(9.0, "step", step=25), rec(FAULT + 11.0, "rendezvous_done", 0, 1)]
    events += [rec(FAULT + 11.25, "checkpoint_loaded", 0, i + 1, step=s) for i, s in enumerate(loads)]
    events += [rec(FAULT + 12.0, "step", 0, 1, step=21), *finished(FAULT + 20.0, range(4))]
    again = {"fault": "restart", "node": "node0", "time": FAULT + 10.5, "args": {}, "result": None}
    logs = {"node1": log}
    return seen_of(
        "kill-rendezvous-host", ETCD, [KILL, again], events, logs=logs, extra={"survivor": "node1", "waiting": waiting}
    )


def test_under_etcd_the_survivor_waits_and_the_job_resumes_from_the_newest_checkpoint():
    report = judged(etcd_run())
    assert report.facts["lost_steps"] == 5 and report.facts["restarts"] == 1
    assert report.facts["recovery"]["total"] == 12.0
    assert report.checks[:4] == [
        Check(WAITED, True, ""),
        Check("its log has no store error", True, ""),
        Check("the job succeeded once node0 came back", True, "exit codes {'node0': 0, 'node1': 0}"),
        Check(RESUMED, True, "newest before the kill 20, loaded [20]"),
    ]
    assert report.explanation.startswith("etcd-v2 keeps the rendezvous in etcd, outside every node")


def test_under_etcd_a_store_error_an_older_load_or_none_fail_and_say_what_was_seen():
    errored = judged(etcd_run(log=f"{STORE_LINE}\n"))
    assert errored.checks[1] == Check("its log has no store error", False, MATCHED[:200])
    assert judged(etcd_run(loads=(10,))).checks[3] == Check(RESUMED, False, "newest before the kill 20, loaded [10]")
    assert judged(etcd_run(loads=(20, 10))).checks[3] == Check(RESUMED, True, "newest before the kill 20, loaded [20]")
    nothing = judged(etcd_run(saved=(), loads=()))
    assert nothing.checks[3] == Check(RESUMED, False, "newest before the kill None, loaded []")
    assert nothing.facts["lost_steps"] is None
    assert not judged(etcd_run(waiting=False)).checks[0].ok
    unlogged = etcd_run()
    unlogged.logs = {}  # no log of the survivor: no store error in it either
    assert judged(unlogged).checks[1] == Check("its log has no store error", True, "")
