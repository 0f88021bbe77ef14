"""kill-rendezvous-host: kill node0, the node whose agent hosts the c10d rendezvous store.

Hypothesis: with c10d rendezvous the store that every agent meets in lives inside
node0's agent. Kill that node and the survivors' workers fail (their peers are gone),
their agents try to open the next rendezvous round, and cannot: the store is gone with
its host. Restarts left or not, the whole job fails. The c10d backend has no
protection against losing that node. (An external store such as etcd-v2 is the usual
answer; the lab has not yet shown what torch does with it.)

    lab exercise run kill-rendezvous-host [--at-step 25]

Look for: in the survivor's log, RendezvousConnectionError / "The connection to the
C10d store has failed", and the survivor's agent exiting although it had restarts left.
"""

from __future__ import annotations

import re

from lab.exercises import observe
from lab.exercises.engine import paced_trainer
from lab.exercises.report import Report
from lab.topology import Topology

NAME = "kill-rendezvous-host"
SUMMARY = "kill node0, which hosts the c10d store; the whole job fails, and why"
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 0, 25
STEPS, CKPT_EVERY = 60, 10


def topology(options) -> Topology:
    return Topology(nodes=2, nproc_per_node=2, max_restarts=2, torch_defaults=options.torch_defaults)


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, CKPT_EVERY)


def run(drill, options) -> Report:
    report = drill.new_report(NAME)
    drill.reach(options.target_rank, options.at_step)
    drill.inject("node0", "kill_node")
    codes = drill.wait_job(240)
    events = drill.events()
    survivor = next(n for n in drill.runtime.attach() if n.name != "node0")
    log = survivor.log_path.read_text(errors="replace")
    error = re.search(r"(RendezvousConnectionError[^\n]*|The connection to the C10d store has failed[^\n]*)", log)
    report.facts.update(restarts=observe.restarts(events), lost_steps=None, final_weights_match_reference=False)
    report.check("the surviving node failed too", codes.get(survivor.name, 0) != 0, f"exit codes {codes}")
    report.check("because it could not reach the rendezvous store", error is not None,
                 error[0][:200] if error else "no store error in the log")
    report.check("no worker group ever started again",
                 not any(e["event"] == "rendezvous_done" and e["restart"] > 0 for e in events))
    report.explanation = ("c10d rendezvous keeps its store in node0's agent: with node0 gone, the next round has "
                          "nowhere to meet, so the restarts left are useless")
    return report
