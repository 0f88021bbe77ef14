"""`lab chaos`: faults at random moments on one long job, some inside a recovery, on a busy
machine if asked; every recovery judged against a bound, and a ledger of where the time went.

The campaign is an exercise the drill engine runs (lab.exercises.engine): Ray, a node agent
per node, the same injection and the same teardown as every drill. Its faults come from a
seeded schedule (lab.chaos.schedule), each is watched until every rank is back
(lab.chaos.campaign), and the ledger (lab.chaos.ledger) sets the measured ETTR beside what
each recovery cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from lab.chaos import campaign, ledger, load
from lab.chaos.campaign import CKPT_EVERY, STEP_TIME_S
from lab.chaos.progress import Progress
from lab.chaos.schedule import KINDS, Planned
from lab.exercises import DrillOptions, drill_job
from lab.exercises.drill import paced_trainer
from lab.report import Report
from lab.topology import Topology

PG_TIMEOUT_S = 20  # a hang is seen at this; each recovery's bound is derived from it


@dataclass(frozen=True)
class Plan:
    faults: list[Planned]
    seed: int
    load: int
    tail_s: float = 15.0  # steps after the last fault, before the job ends

    def steps(self, per_s: float = 1 / STEP_TIME_S) -> int:
        """Enough steps for every fault and the tail at `per_s` steps a second (the paced rate,
        unless a busy machine measured slower: campaign.fit_to_machine)."""
        last = max((p.at_s for p in self.faults), default=0.0)
        return int((last + self.tail_s) * per_s) + 40


def exercise(plan: Plan) -> Any:
    """The campaign as the engine runs an exercise: a name, its job, its faults, its act."""
    injects = tuple(sorted({f for p in plan.faults for f in KINDS[p.kind].injects}))
    args = paced_trainer(plan.steps(), CKPT_EVERY, STEP_TIME_S)

    def topology(options: DrillOptions) -> Topology:
        return drill_job(options, pg_timeout_s=PG_TIMEOUT_S, max_restarts=len(plan.faults) * 2 + 2)

    def run(drill, options: DrillOptions) -> Report:
        blows: list[campaign.Blow] = []
        style = "in-process" if drill.topology.in_process else "restart"
        setup = {"seed": plan.seed, "load": plan.load, "recovery_style": style,
                 "world_size": drill.topology.world_size, "steps": plan.steps()}  # fmt: skip
        try:  # the load starts now: the lab has taken its run dir over (lab.chaos.load says why)
            with load.busy(plan.load, str(drill.runtime.run_dir.path)) as running:
                steps = campaign.fit_to_machine(drill, plan.steps, say=drill.progress)
                job = paced_trainer(steps, CKPT_EVERY, STEP_TIME_S) if steps else args
                setup["steps"] = steps or plan.steps()
                campaign.run(drill, plan.faults, job, CKPT_EVERY, blows, say=drill.progress)
                drill.wait_job(setup["steps"] * STEP_TIME_S * 4 + 240)
                loaded = running()
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the ledger of what ran, while the events still exist
            state.partial = ledger.ledger(blows, _progress(drill), {"identical": False, "why": "interrupted"}, setup)
            raise
        weights = campaign.final_weights(drill, job[:-2])  # the reference runs unpaced
        record = ledger.ledger(blows, _progress(drill), weights, setup)
        report = drill.new_report("chaos")
        report.check("every fault injected", record["faults_injected"] == len(plan.faults),
                     f"{record['faults_injected']} of {len(plan.faults)}")  # fmt: skip
        report.check("no stuck recovery", record["stuck"] == 0, f"{record['stuck']} past their bound")
        report.check("final weights bit-identical", bool(weights.get("identical")), weights.get("why", ""))
        report.check(f"the load ran beside the whole job ({plan.load} busy)", loaded == plan.load,
                     f"{loaded} of {plan.load} still running at the job's end")  # fmt: skip
        report.facts["ledger"] = record
        return report

    state = SimpleNamespace(
        partial=None,  # the ledger of what ran, when the campaign was interrupted
        NAME="chaos",
        SUMMARY="random faults on one long job",
        IN_PROCESS_JUDGED=True,
        INJECTS=injects,
        DEFAULT_TARGET_RANK=0,
        DEFAULT_AT_STEP=1,
        topology=topology,
        trainer_args=lambda options: args,
        run=run,
    )
    return state


def _progress(drill) -> Progress:
    progress = Progress(drill.events_dir)
    progress.poll()
    return progress
