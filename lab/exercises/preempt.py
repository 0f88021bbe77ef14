"""preempt: SIGTERM one node, as a cloud provider reclaiming a VM with a grace period.

Hypothesis: torchrun's agent passes SIGTERM to its workers; the trainer's ranks agree
(one all-reduce per step) to stop at the next step boundary, so every rank, on every
node, checkpoints the same step and exits well within the grace period. The job,
started again, resumes from exactly that step: no step is lost, and the weights end
bit-identical to an uninterrupted run.

    lab exercise run preempt [--target-rank 1] [--at-step 25]

Look for: "preempted: checkpointed step N" from every rank; `exit` events with
reason "preempted"; in the restarted job, `checkpoint_loaded` at step N.
"""

from __future__ import annotations

import time

from lab.exercises import drill_job, observe
from lab.exercises.drill import aimed, paced_trainer
from lab.exercises.seen import Seen
from lab.health.events import Event, ExitReason
from lab.report import Report
from lab.topology import Topology

NAME = "preempt"
SUMMARY = "SIGTERM a node with a grace period; ranks checkpoint together, the rerun loses no step"
INJECTS = ("preempt",)  # Node faults it uses (lab.exercises.grid)
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 1, 25
STEPS, CKPT_EVERY, GRACE_S = 60, 10, 10.0


def topology(options) -> Topology:
    return drill_job(options)


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, CKPT_EVERY)


def run(drill, options) -> Report:
    node, _ = drill.reach(options.target_rank, options.at_step)
    fault = aimed(drill.inject(node, "preempt", grace_s=GRACE_S), options.target_rank)
    gone_after = time.time() - fault["time"]
    world = drill.topology.world_size
    drill.wait_for(
        lambda: len([e for e in drill.events() if e["event"] == Event.EXIT]) >= world, 60, "every rank to stop"
    )
    # Under torch's c10d the healthy agents would wait out torchrun's 5-minute exit barrier (the lab's
    # rendezvous counts a preempted agent in: lab/node/exit_barrier.py): stopped, as a scheduler would.
    for other in drill.runtime.attach():
        other.stop(grace_s=5.0)
    drill.progress("starting the job again")  # as a scheduler would
    restarted_at = time.time()
    drill.rerun(trainer_args(options))
    seen = drill.gather(
        NAME, 240, reference=trainer_args(options), gone_after_s=gone_after, preempted=node, restarted_at=restarted_at
    )
    return judge(seen, options)


def judge(seen: Seen, options) -> Report:
    report = seen.new_report()
    node, gone_after, restarted_at = seen.extra["preempted"], seen.extra["gone_after_s"], seen.extra["restarted_at"]
    before = [e for e in seen.events if e["time"] < restarted_at]
    rerun = [e for e in seen.events if e["time"] >= restarted_at]
    exits = [e for e in before if e["event"] == Event.EXIT]
    stopped_at = {e["step"] for e in exits if e.get("reason") == ExitReason.PREEMPTED}
    report.check(f"{node} was gone within the {GRACE_S:g} s grace period", gone_after < GRACE_S, f"{gone_after:.2f} s")
    report.check(
        "every rank stopped as preempted, at the same step",
        len(exits) == seen.topology.world_size
        and all(e.get("reason") == ExitReason.PREEMPTED for e in exits)
        and len(stopped_at) == 1,
        f"exits {[(e['rank'], e.get('reason'), e['step']) for e in exits]}",
    )
    step = min(stopped_at) if stopped_at else None
    saved = {e["step"] for e in before if e["event"] == Event.CHECKPOINT_SAVED}
    report.check("the preemption step was checkpointed", step in saved, f"step {step}, saved {sorted(saved)}")
    loaded = [e["step"] for e in rerun if e["event"] == Event.CHECKPOINT_LOADED and e["rank"] == 0]
    report.facts["restarts"] = 0
    report.facts["lost_steps"] = step - loaded[0] if loaded and step is not None else None
    report.check("the rerun succeeded", all(c == 0 for c in seen.codes.values()), f"exit codes {seen.codes}")
    report.check(
        "the rerun resumed at the preemption step: no step lost",
        report.facts["lost_steps"] == 0,
        f"stopped at {step}, resumed from {loaded[:1]}",
    )
    observe.judge_reference(report, seen)
    return report


SCRIPT_RECOVERY = "rerun"


def break_script(drill, target: int, ckpt_dir: str | None, own: dict) -> dict:
    """On a user's script: SIGTERM the target rank's node with a grace period; the lab starts
    the job again once it has ended, as a scheduler would."""
    node, _ = drill.locate(target)
    return aimed(drill.inject(node, "preempt", grace_s=GRACE_S), target)
