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

from lab.exercises import observe
from lab.exercises.engine import aimed, paced_trainer
from lab.report import Report
from lab.topology import Topology

NAME = "preempt"
SUMMARY = "SIGTERM a node with a grace period; ranks checkpoint together, the rerun loses no step"
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 1, 25
STEPS, CKPT_EVERY, GRACE_S = 60, 10, 10.0


def topology(options) -> Topology:
    return Topology(nodes=2, nproc_per_node=2, torch_defaults=options.torch_defaults)


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, CKPT_EVERY)


def run(drill, options) -> Report:
    report = drill.new_report(NAME)
    target = options.target_rank
    node, _ = drill.reach(target, options.at_step)
    fault = drill.inject(node, "preempt", grace_s=GRACE_S)
    gone_after = time.time() - fault["time"]
    world = drill.topology.world_size
    exits = drill.wait_for(
        lambda: (found := [e for e in drill.events() if e["event"] == "exit"]) and len(found) >= world and found,
        60,
        "every rank to stop",
    )
    for other in drill.runtime.attach():  # healthy agents would wait out torchrun's 5-minute exit barrier
        other.stop(grace_s=5.0)
    stopped_at = {e["step"] for e in exits if e.get("reason") == "preempted"}
    report.check(f"{node} was gone within the {GRACE_S:g} s grace period", gone_after < GRACE_S, f"{gone_after:.2f} s")
    report.check(
        "every rank stopped as preempted, at the same step",
        len(exits) == world and all(e.get("reason") == "preempted" for e in exits) and len(stopped_at) == 1,
        f"exits {[(e['rank'], e.get('reason'), e['step']) for e in exits]}",
    )
    step = min(stopped_at) if stopped_at else None
    saved = {e["step"] for e in drill.events() if e["event"] == "checkpoint_saved"}
    report.check("the preemption step was checkpointed", step in saved, f"step {step}, saved {sorted(saved)}")

    events, codes, loaded = observe.rerun_from_checkpoint(drill, trainer_args(options))
    report.facts["restarts"] = 0
    report.facts["lost_steps"] = step - loaded[0] if loaded and step is not None else None
    report.check("the rerun succeeded", all(c == 0 for c in codes.values()), f"exit codes {codes}")
    report.check(
        "the rerun resumed at the preemption step: no step lost",
        report.facts["lost_steps"] == 0,
        f"stopped at {step}, resumed from {loaded[:1]}",
    )
    observe.check_matches_reference(report, drill, events, trainer_args(options))
    return report


SCRIPT_RECOVERY = "rerun"


def break_script(drill, target: int, ckpt_dir: str | None) -> dict:
    """On a user's script: SIGTERM the target rank's node with a grace period; the lab starts
    the job again once it has ended, as a scheduler would."""
    node, _ = drill.locate(target)
    return aimed(drill.inject(node, "preempt", grace_s=GRACE_S), target)
