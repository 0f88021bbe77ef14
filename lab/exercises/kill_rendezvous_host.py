"""kill-rendezvous-host: kill node0, the node whose agent hosts the c10d rendezvous store.

Hypothesis: with c10d rendezvous the store that every agent meets in lives inside
node0's agent. Kill that node and the survivors' workers fail (their peers are gone),
their agents try to open the next rendezvous round, and cannot: the store is gone with
its host. Restarts left or not, the whole job fails. The c10d backend has no
protection against losing that node.

With `--rdzv-backend etcd-v2` the rendezvous lives in an etcd server the lab runs on the
host, outside every node. Measured: the survivor's workers still fail (their peers are
gone), but its agent opens the next round in etcd and waits there, sending keep-alives,
for up to the join timeout (120 s). When the runtime brings node0 back, the round
completes with 4 ranks, the job resumes from its newest checkpoint and finishes
bit-identical to an uninterrupted run. Node0 stops being special: any node can die.

    lab exercise run kill-rendezvous-host [--at-step 25] [--rdzv-backend etcd-v2]

Look for, c10d: in the survivor's log, RendezvousConnectionError / "The connection to
the C10d store has failed", and the survivor's agent exiting although it had restarts
left. etcd-v2: the survivor's agent events "attempts to join the next round" and
keep-alive heartbeats while node0 is down, then "has joined round 1"; its node log has
no store error.
"""

from __future__ import annotations

import re
import time

from lab.exercises import drill_job, observe
from lab.exercises.drill import aimed, paced_trainer
from lab.exercises.seen import Seen
from lab.health.events import Event
from lab.options import RDZV_BACKEND
from lab.report import Report
from lab.topology import Topology

NAME = "kill-rendezvous-host"
SUMMARY = "kill node0, which hosts the c10d store; the job fails (c10d) or waits for it (etcd-v2)"
INJECTS = ("kill_node",)  # Node faults it uses (lab.exercises.grid); etcd-v2 adds restart
MIN_NODES = 2  # node0 to lose and a survivor
NO_SCRIPT = "losing node0, the c10d store's host, ends any job alike (use kill-node on your script)"
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 0, 25
STEPS, CKPT_EVERY = 60, 10
STORE_ERROR = re.compile(r"(RendezvousConnectionError[^\n]*|The connection to the C10d store has failed[^\n]*)")
# How long the drill leaves node0 dead under etcd-v2: past the moment c10d's survivor failed.
DOWN_S = 10
RECOVERY_NEEDS = ("torchrun", "kill-rendezvous-host drills the loss of torch's rendezvous host (c10d or etcd-v2)")
OPTIONS = (
    RDZV_BACKEND.but(
        choices=("c10d", "etcd-v2"),
        default="c10d",
        help="where the rendezvous lives (etcd-v2: a lab-run etcd on the host; default c10d)",
    ),
)


def topology(options) -> Topology:
    return drill_job(options, max_restarts=2, rdzv_backend=options.own.get("rdzv_backend", "c10d"))


def injects(options) -> tuple[str, ...]:
    return (*INJECTS, "restart") if options.own.get("rdzv_backend") == "etcd-v2" else INJECTS


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, CKPT_EVERY)


def run(drill, options) -> Report:
    drill.reach(options.target_rank, options.at_step)
    fault = aimed(drill.inject(drill.store_host, "kill_node"), options.target_rank)
    survivor = next(n for n in drill.runtime.attach() if n.name != drill.store_host)
    if drill.topology.rdzv_backend != "etcd-v2":
        return judge(drill.gather(NAME, 240, logs=True, survivor=survivor.name), options)
    joining = drill.wait_for(
        lambda: observe.first_time(
            observe.agent_events(drill.events_dir),
            fault["time"],
            lambda r: r["node"] == survivor.name and "attempts to join" in r["message"],
        ),
        60,
        "the survivor's agent to open the next round",
    )
    time.sleep(max(0.0, joining + DOWN_S - time.time()))
    waiting = survivor.exit_code() is None
    drill.progress(f"after {time.time() - fault['time']:.0f}s the survivor is {'waiting' if waiting else 'gone'}")
    drill.inject(drill.store_host, "restart")
    seen = drill.gather(NAME, 240, logs=True, reference=trainer_args(options), survivor=survivor.name, waiting=waiting)
    return judge(seen, options)


def judge(seen: Seen, options) -> Report:
    report = seen.new_report()
    if seen.topology.rdzv_backend == "etcd-v2":
        return judge_etcd(seen, report)
    events, codes, survivor = seen.events, seen.codes, seen.extra["survivor"]
    error = STORE_ERROR.search(seen.logs.get(survivor, ""))
    report.facts.update(restarts=observe.restarts(events), lost_steps=None, final_weights_match_reference=False)
    report.check("the surviving node failed too", codes.get(survivor, 0) != 0, f"exit codes {codes}")
    report.check(
        "because it could not reach the rendezvous store",
        error is not None,
        error[0][:200] if error else "no store error in the log",
    )
    report.check(
        "no worker group ever started again",
        not any(e["event"] == Event.RENDEZVOUS_DONE and e["restart"] > 0 for e in events),
    )
    report.explanation = (
        "c10d rendezvous keeps its store in node0's agent: with node0 gone, the next round has "
        "nowhere to meet, so the restarts left are useless"
    )
    return report


def judge_etcd(seen: Seen, report: Report) -> Report:
    events, codes, fault = seen.events, seen.codes, seen.injected("kill_node")
    saved, reached, loaded = observe.checkpoint_progress(events, fault["time"])
    error = STORE_ERROR.search(seen.logs.get(seen.extra["survivor"], ""))
    report.facts.update(
        restarts=observe.restarts(events),
        lost_steps=reached - loaded[0] if loaded else None,
        recovery=observe.recovery_breakdown(events, seen.agents, fault["time"]),
    )
    report.check(
        f"the survivor waited in the next round while node0 was down ({DOWN_S} s and more)", seen.extra["waiting"]
    )
    report.check("its log has no store error", error is None, error[0][:200] if error else "")
    report.check("the job succeeded once node0 came back", all(c == 0 for c in codes.values()), f"exit codes {codes}")
    report.check(
        "resumed from the newest checkpoint",
        bool(loaded) and bool(saved) and loaded[0] == max(saved),
        f"newest before the kill {max(saved, default=None)}, loaded {loaded[:1]}",
    )
    observe.judge_reference(report, seen)
    report.explanation = (
        "etcd-v2 keeps the rendezvous in etcd, outside every node: the survivor's agent waits "
        "there (up to the join timeout) and the job re-forms when node0 returns"
    )
    return report
