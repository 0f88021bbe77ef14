"""`lab chaos`: faults at random moments on one long job, some inside a recovery, on a busy
machine if asked; every recovery judged against a bound, and a ledger of where the time went.

The campaign is an exercise the drill engine runs (lab.exercises.engine): Ray, a node agent
per node, the same injection and the same teardown as every drill. Its faults come from a
seeded schedule (lab.chaos.schedule), each is watched until every rank is back
(lab.chaos.campaign), and the ledger (lab.chaos.ledger) sets the measured ETTR beside what
each recovery cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from lab.chaos import campaign, ledger, load
from lab.chaos.campaign import CKPT_EVERY, STEP_TIME_S
from lab.chaos.on_script import ScriptTarget
from lab.chaos.progress import Progress
from lab.chaos.schedule import KINDS, Planned
from lab.exercises import DrillOptions, drill_job, samples
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

    def steps(self) -> int:
        """Enough steps for every fault and the tail at the paced rate (a busy machine trains
        slower: the job then ends soon after its schedule, campaign.finish_soon)."""
        last = max((p.at_s for p in self.faults), default=0.0)
        return int((last + self.tail_s) / STEP_TIME_S) + 40


def exercise(plan: Plan, target: ScriptTarget | None = None) -> Any:
    """The campaign as the engine runs an exercise: a name, its job, its faults, its act.
    target: a user's script (lab.chaos.on_script); None: the lab's trainer."""
    injects = tuple(sorted({f for p in plan.faults for f in KINDS[p.kind].injects}))
    args = list(target.spec.args) if target else paced_trainer(plan.steps(), CKPT_EVERY, STEP_TIME_S)

    def topology(options: DrillOptions) -> Topology:
        job = drill_job(options, pg_timeout_s=PG_TIMEOUT_S, max_restarts=len(plan.faults) * 2 + 2)
        return target.topology(job) if target else job

    def run(drill, options: DrillOptions) -> Report:
        blows: list[campaign.Blow] = []
        style = "in-process" if drill.topology.in_process else "restart"
        setup = {"seed": plan.seed, "load": plan.load, "recovery_style": style, "runtime": drill.runtime.name,
                 "target": target.spec.path if target else "trainer", "nodes": drill.topology.nodes,
                 "world_size": drill.topology.world_size, "steps": None if target else plan.steps()}  # fmt: skip
        try:  # the load starts now: the lab has taken its run dir over (lab.chaos.load says why)
            with load.busy(plan.load, str(drill.runtime.run_dir.path)) as running:
                campaign.run(drill, plan.faults, args, CKPT_EVERY, blows, say=drill.progress)
                over = time.time()  # the ledger counts the job's time up to here
                _job_ends(drill, plan, target, blows, setup)
                loaded = running()
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the ledger of what ran, while the events still exist
            state.partial = ledger.ledger(blows, _progress(drill), {"identical": False, "why": "interrupted"}, setup)
            state.logs = drill.node_logs()
            raise
        progress = _progress(drill)
        if target:
            began = min((when for when, _, _ in progress.steps), default=time.time())  # the job's first step
            weights = target.final_result(drill, job_s=time.time() - began)
        else:
            job = paced_trainer(setup["steps"], CKPT_EVERY, STEP_TIME_S)  # as it ran last (finish_soon)
            weights = campaign.final_weights(drill, job[:-2], progress, blows)  # the reference runs unpaced
        record = ledger.ledger(blows, progress, weights, setup, until=over)
        state.logs = drill.node_logs()  # kept beside the ledger: what a slow recovery's nodes said
        report = drill.new_report("chaos")
        _judge(report, record, plan, target is not None, loaded)
        samples.check(report, drill.events())  # exactly-once data, through every recovery
        record["samples"] = report.facts.get("samples")
        report.facts["ledger"] = record
        return report

    state = SimpleNamespace(
        partial=None,  # the ledger of what ran, when the campaign was interrupted
        logs={},  # each node's log (its last 8 MiB), read before the lab comes down
        NAME="chaos",
        SUMMARY="random faults on one long job",
        IN_PROCESS_JUDGED=target is None,
        SCRIPT_TARGET=True,  # it breaks a user's script through its own strikes (lab.exercises.grid)
        INJECTS=injects,
        DEFAULT_TARGET_RANK=0,
        DEFAULT_AT_STEP=1,
        topology=topology,
        trainer_args=lambda options: args,
        run=run,
    )
    if target:
        state.SCRIPT = target.spec.path
    return state


def _job_ends(drill, plan: Plan, target: ScriptTarget | None, blows: list, setup: dict) -> None:
    """Until the job ends: a script's when it does; the trainer's soon after the schedule."""
    if target:  # the script's length is its own
        setup["exit_codes"] = script_job_end(drill, target.spec.deadline_s + plan.faults[-1].at_s)
        return
    if not any(b.finding for b in blows):  # a stuck job is left to its bound below
        setup["steps"] = campaign.finish_soon(drill, plan.steps(), say=drill.progress)
    drill.wait_job(setup["steps"] * STEP_TIME_S * 4 + 240)


def script_job_end(drill, bound_s: float) -> dict[str, int | None]:
    """Each node's exit status at the script's end. Once a node has ended, the others get
    campaign.ALONE_S to end too, and are then stopped, as a scheduler ends a fixed-size job that
    lost a node: an agent out of restarts leaves its peers waiting in the rendezvous for it, up
    to its join timeout (10 minutes), and a CI run once timed out there with nothing kept. A job
    still running at the bound is stopped the same way; its codes say so (None)."""
    codes = drill.wait_end(bound_s, campaign.ALONE_S)
    if any(code is None for code in codes.values()):  # asked before the stop below ends them
        drill.progress(f"still running at the bound: {drill.standing()}")
    for node in drill.runtime.attach():
        if codes.get(node.name) is None:
            node.stop(grace_s=5.0)
    return codes


def _judge(report: Report, record: dict, plan: Plan, on_script: bool, loaded: int) -> None:
    injected, planned = record["faults_injected"], len(plan.faults)
    short = (
        " (your script ended first: give it more steps, or fewer faults)"
        if on_script and not record["findings"]
        else ""
    )
    report.check(
        "every fault injected", injected == planned, f"{injected} of {planned}" + ("" if injected == planned else short)
    )
    report.check("no stuck recovery", record["stuck"] == 0, f"{record['stuck']} past their bound")
    codes = record.get("exit_codes")
    if codes is not None:  # a script's job: it ends on its own, every node with exit 0
        still = " (None: still running at the bound, stopped)" if None in codes.values() else ""
        report.check(
            "the job ended with exit 0", all(c == 0 for c in codes.values()), f"node exit codes {codes}{still}"
        )
    weights = record["final_weights"]
    if weights.get("identical") is not None:  # a script's result is compared when --compare names it
        what = "final result identical" if on_script else "final weights bit-identical"
        report.check(what, bool(weights["identical"]), weights.get("why", ""))
    report.check(f"the load ran beside the whole job ({plan.load} busy)", loaded == plan.load,
                 f"{loaded} of {plan.load} still running at the job's end")  # fmt: skip


def _progress(drill) -> Progress:
    """Everything the ranks wrote (one poll reads at most a chunk of each file: the first 100-fault
    campaign's ledger and its weights' forensics were drawn from the first 4 MB of each)."""
    return Progress(drill.events_dir).polled(whole=True)
