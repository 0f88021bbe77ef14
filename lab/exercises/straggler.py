"""straggler: one slow rank slows every rank, and the straggler alert names it.

Hypothesis: DDP steps in lockstep, so when one rank runs at a quarter of its speed
(SIGSTOP/SIGCONT on a duty cycle: stopped 0.75 s of every second) every rank's step rate
drops with it: the others wait inside the gradient all-reduce. Step time alone cannot
say who is slow (it is the same everywhere); time spent *outside* the all-reduce can.
The alert LabStraggler compares exactly that against the median rank, and fires in
the lab's real Prometheus for the slowed rank only.

    lab exercise run straggler [--target-rank 1] [--at-step 25]

Look for: `rate(lab_steps_total[30s])` falling on every rank together;
`lab:busy_seconds_per_step:rate1m` high for one rank; the LabStraggler alert at
http://127.0.0.1:9090/alerts.
"""

from __future__ import annotations

import time

from lab.exercises import drill_job
from lab.exercises.drill import aimed, paced_trainer
from lab.exercises.seen import Seen
from lab.health.events import Event
from lab.report import Report
from lab.topology import Topology

NAME = "straggler"
SUMMARY = "slow one rank to a quarter speed; every rank slows, the alert names the straggler"
INJECTS = ("slow_worker", "unslow_worker")  # Node faults it uses (lab.exercises.grid)
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 1, 25
STEPS = 2000
NEEDS_PROMETHEUS = True
WINDOW_S = 5.0  # the rate before the fault: over the last WINDOW_S
PERIOD_S = 1.0  # stopped 0.75 s of each PERIOD_S; the rate after: from one period in to the alert
LOST_AT_LEAST = 0.75  # the slowed rank runs under 3/4 of its rate before


def topology(options) -> Topology:
    return drill_job(options)


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, 0)


def step_rates(events: list[dict], since: float, until: float) -> dict[int, float]:
    steps: dict[int, list[int]] = {}
    for e in events:
        if e["event"] == Event.STEP and since <= e["time"] <= until:
            steps.setdefault(e["rank"], []).append(e["step"])
    return {rank: (max(s) - min(s)) / (until - since) for rank, s in sorted(steps.items()) if s}


def run(drill, options) -> Report:
    node, local_rank = drill.reach(options.target_rank, options.at_step)
    fault = drill.inject(node, "slow_worker", local_rank=local_rank, stopped_fraction=0.75, period_s=PERIOD_S)
    aimed(fault, options.target_rank)
    prom = drill.runtime.prometheus

    def straggler_alert():
        return [a for a in prom.alerts() if a["labels"].get("alertname") == "LabStraggler" and a["state"] == "firing"]

    firing = drill.wait_for(straggler_alert, 150, "the LabStraggler alert to fire")
    fired_at = time.time()
    busy = {int(s["metric"]["rank"]): s["value"] for s in prom.query("lab:busy_seconds_per_step:rate1m")}
    drill.inject(node, "unslow_worker")
    return judge(drill.gather(NAME, None, firing=firing, fired_at=fired_at, busy=busy), options)


def judge(seen: Seen, options) -> Report:
    report = seen.new_report()
    fault, fired_at = seen.injected("slow_worker"), seen.extra["fired_at"]
    target, fired_after = fault["rank"], fired_at - fault["time"]
    before = step_rates(seen.events, fault["time"] - WINDOW_S, fault["time"])
    after = step_rates(seen.events, fault["time"] + PERIOD_S, fired_at)
    busy = {int(rank): value for rank, value in seen.extra["busy"].items()}  # JSON keys are text
    report.facts.update(
        restarts=0,
        step_rate_before=before,
        step_rate_after=after,
        busy_seconds_per_step=busy,
        alert_fired_after_s=fired_after,
    )
    report.check(
        "every rank slowed down together",
        slowed_together(before, after, target, seen.topology.world_size, fired_at - fault["time"] - PERIOD_S),
        f"steps/s before {fmt(before)}, after {fmt(after)}",
    )
    named = sorted({int(a["labels"]["rank"]) for a in seen.extra["firing"]})
    report.check(
        "LabStraggler fired for the slowed rank only",
        named == [target],
        f"firing for ranks {named} after {fired_after:.0f} s",
    )
    report.check(
        "the slowed rank is the busiest outside the all-reduce",
        bool(busy) and max(busy, key=lambda rank: busy[rank]) == target,
        f"busy seconds per step {fmt(busy)}",
    )
    return report


def slowed_together(before: dict, after: dict, target: int, world_size: int, window_s: float) -> bool:
    """The slowed rank lost at least a quarter of its rate, and every other rank fell to its
    rate (within two steps over the window: a step apart at each end): they wait for it in the all-reduce.

    Not a quarter speed for all: stopped 3/4 of each second, the slowed rank frees a core
    its peers then use, so on a machine whose cores the ranks share the job runs at ~0.6 of
    its pace. Lockstep, not a ratio, is what says the others waited."""
    if len(after) != world_size or target not in after:
        return False
    own_drop = after[target] < LOST_AT_LEAST * before.get(target, 0.0)
    return own_drop and all(abs(rate - after[target]) <= 2.0 / max(window_s, 1.0) for rate in after.values())


def fmt(values: dict) -> str:
    return "{" + ", ".join(f"{k}: {v:.2f}" for k, v in values.items()) + "}"


SCRIPT_RECOVERY = "none"
SCRIPT_SLOW_S = 10.0


def break_script(drill, target: int, ckpt_dir: str | None, own: dict) -> dict:
    """On a user's script: run the target rank at a quarter speed for SCRIPT_SLOW_S, then
    let it go; the job should slow down and finish without a restart."""
    node, local_rank = drill.locate(target)
    fault = drill.inject(node, "slow_worker", local_rank=local_rank, stopped_fraction=0.75, period_s=1.0)
    time.sleep(SCRIPT_SLOW_S)
    drill.inject(node, "unslow_worker")
    return aimed(fault, target)
