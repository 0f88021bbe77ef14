"""rank-exception: one rank raises an ordinary Python exception mid-run; the group restarts.

Hypothesis: an exception that escapes one rank's script (a bad batch, a failed assertion,
a NaN check) ends that worker with exit code 1, not a signal. torchrun's agent sees a failed
worker exactly as after a kill: it stops the others, runs a new rendezvous round and starts
a fresh group, which resumes from the newest checkpoint. The error is kept: the rank's exit
record (and `lab why`) names the exception and where it was raised.

    lab exercise run rank-exception [--target-rank 1] [--at-step 25]
    lab exercise run rank-exception --script train.py -- ARGS   # your script, unmodified

The fault is SIGUSR2 to the target worker, which the trainer and every watched script
(lab.node.user_script) turn into RuntimeError raised from the line the rank is running
(lab.health.injected_error). Look for: in the node log, the traceback and "exitcode: 1";
in the events, the rank's exit record with the error, then restart 1's checkpoint_loaded.
"""

from __future__ import annotations

from lab.exercises import drill_job, observe
from lab.exercises.drill import aimed, paced_trainer
from lab.exercises.seen import Seen
from lab.health import injected_error
from lab.health.events import Event, ExitReason
from lab.report import Report
from lab.topology import Topology

NAME = "rank-exception"
SUMMARY = "one rank raises a Python exception; the group restarts and resumes bit-identical"
INJECTS = ("kill_worker",)  # Node faults it uses (lab.exercises.grid): SIGUSR2, not a kill
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 1, 25
STEPS, CKPT_EVERY = 60, 10


def topology(options) -> Topology:
    return drill_job(options, max_restarts=2)


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, CKPT_EVERY)


def raise_in(drill, target: int) -> dict:
    node, local_rank = drill.locate(target)
    return aimed(drill.inject(node, "kill_worker", local_rank=local_rank, sig=int(injected_error.SIGNAL)), target)


def run(drill, options) -> Report:
    drill.reach(options.target_rank, options.at_step)
    raise_in(drill, options.target_rank)
    return judge(drill.gather(NAME, 240, reference=trainer_args(options)), options)


def judge(seen: Seen, options) -> Report:
    report = seen.new_report()
    fault_time = seen.injected("kill_worker")["time"]
    raised = [
        e
        for e in seen.events
        if e["event"] == Event.EXIT
        and e.get("reason") == ExitReason.ERROR
        and e["rank"] == options.target_rank
        and e["time"] > fault_time
    ]
    report.facts["error"] = raised[0].get("error") if raised else None
    report.check(
        f"rank {options.target_rank} died of the exception, recorded",
        bool(raised) and injected_error.MARK in str(raised[0].get("error")),
        f"its exit record: {report.facts['error']}"
        if raised
        else "no error exit record from that rank after the fault",
    )
    observe.judge_restart_resume(report, seen, fault_time, CKPT_EVERY)
    return report


SCRIPT_RECOVERY = "restart"


def break_script(drill, target: int, ckpt_dir: str | None, own: dict) -> dict:
    """On a user's script (lab.exercises.script): the target rank raises RuntimeError."""
    return raise_in(drill, target)
