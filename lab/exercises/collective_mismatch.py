"""collective-mismatch: one rank issues a collective its peers never issue.

Hypothesis: a mismatched collective is the classic silent hang: the odd rank waits in
a collective nobody else joins, and the others wait in theirs. With
TORCH_DISTRIBUTED_DEBUG=DETAIL every collective is checked against the other ranks'
first (shape, type, op), so the job fails at once with an error that names the
mismatch, instead of hanging until a timeout (gloo's default: 30 minutes).

    lab exercise run collective-mismatch [--target-rank 1] [--at-step 25]

The job runs lab/workloads/collective_loop.py, which averages gradients by hand: DDP
itself crashes (SIGSEGV) when constructed under DETAIL on torch 2.13 CPU. The bug is
one marked line there, armed in the target rank by SIGUSR1. Look for: "Detected mismatch between collectives on ranks"
in the node logs, seconds after the injection, well inside the process-group timeout.
"""

from __future__ import annotations

import re
import signal

from lab.exercises import drill_job
from lab.exercises.drill import aimed
from lab.exercises.seen import Seen
from lab.health.events import Event, ExitReason
from lab.report import Report
from lab.topology import Topology

NAME = "collective-mismatch"
NO_SCRIPT = "the extra all-reduce is injected inside the lab's collective_loop workload, a hook your script lacks"
WORKLOAD = "collective_loop"
SUMMARY = "one rank issues an extra all-reduce; DETAIL debugging fails fast and names it"
INJECTS = ("kill_worker",)  # Node faults it uses (lab.exercises.grid): SIGUSR1
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 1, 25
STEPS, PG_TIMEOUT_S = 60, 60


def topology(options) -> Topology:
    return drill_job(options, pg_timeout_s=PG_TIMEOUT_S, distributed_debug="DETAIL")


def trainer_args(options) -> list[str]:
    return ["--steps", str(STEPS), "--step-time", "0.1"]


def run(drill, options) -> Report:
    node, local_rank = drill.reach(options.target_rank, options.at_step)
    aimed(drill.inject(node, "kill_worker", local_rank=local_rank, sig=int(signal.SIGUSR1)), options.target_rank)
    return judge(drill.gather(NAME, PG_TIMEOUT_S * 3, logs=True), options)


def judge(seen: Seen, options) -> Report:
    report = seen.new_report()
    events, codes, fault = seen.events, seen.codes, seen.injected("kill_worker")
    failed_at = min(
        (e["time"] for e in events if e["event"] == Event.EXIT and e.get("reason") == ExitReason.ERROR), default=None
    )
    named = re.search(r"Detected mismatch between collectives on ranks[^\n]*", "".join(seen.logs.values()))
    report.facts["seconds_to_failure"] = failed_at - fault["time"] if failed_at else None
    report.facts["restarts"] = 0
    report.check("the injected collective ran", any(e["event"] == Event.INJECTED_EXTRA_COLLECTIVE for e in events))
    report.check("the job failed", any(c != 0 for c in codes.values()), f"exit codes {codes}")
    report.check("the error names the mismatch", named is not None, named[0][:300] if named else "no such error")
    seconds = report.facts["seconds_to_failure"]
    report.check(
        f"it failed fast, not at the {PG_TIMEOUT_S} s timeout",
        seconds is not None and seconds < PG_TIMEOUT_S / 2,
        f"{seconds or 0:.1f} s after the injection",
    )
    return report
