"""A chaos campaign's act: one long trainer job, the schedule's faults one after another, each
recovery watched against a bound, and the final weights against an uninterrupted run.

It runs as a drill does (lab.exercises.engine: Ray, one node agent per node, teardown in every
case), so whatever a drill's faults can reach, a campaign reaches. A fault is judged before
the next lands; the kinds that strike twice put their second blow inside the first's recovery.
A recovery that passes its bound is a finding (which ranks had not come back, and where each
stood); the campaign then stops cleanly instead of hanging.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from lab.chaos import divergence
from lab.chaos.progress import Progress
from lab.chaos.schedule import KINDS, Planned
from lab.chaos.strikes import PREEMPT_GRACE_S, loses_the_job, strike
from lab.errors import LabError
from lab.exercises import observe
from lab.exercises.drill import paced_trainer

POLL_S = 0.05
ALONE_S = 10.0  # after a node of the job ended, how long the others get to end on their own (start_again)
FINISH_STEPS = 100  # steps past the front the job runs once the schedule is over (finish_soon)
STEP_TIME_S, CKPT_EVERY = 0.05, 20  # the campaign's paced trainer (lab.chaos)


@dataclass
class Blow:
    """One planned fault as it went: when it landed, whom it hit, and how the job came back."""

    kind: str
    planned_at_s: float
    ranks: list[int] = field(default_factory=list)
    time: float | None = None  # when it landed (epoch seconds); None: never injected
    front: int = 0  # the highest step done when it landed
    recovered_s: float | None = None  # until every rank was two steps past that front
    bound_s: float = 0.0
    finding: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "planned_at_s": self.planned_at_s,
            "ranks": self.ranks,
            "time": self.time,
            "front": self.front,
            "recovered_s": None if self.recovered_s is None else round(self.recovered_s, 3),
            "bound_s": self.bound_s,
            "finding": self.finding,
        }


def bound_s(kind: str, pg_timeout_s: int) -> float:
    """How long a recovery may take before it is a finding: a death is seen at once, a hang only
    at the process-group timeout (or, in-process, a keeper's silence); each then rejoins within
    the rendezvous' last call. Two process-group timeouts and 30 s cover every path."""
    return 2 * pg_timeout_s + 30.0


def finish_soon(drill: Any, steps: int, say=print) -> int:
    """Once the schedule is over, the job ends FINISH_STEPS past the front, whatever rate this
    machine gives it: it is preempted (every rank checkpoints at an agreed step) and started
    again for those steps, resuming from that checkpoint, so its final weights still match an
    uninterrupted run of as many steps. A job sized for the paced rate ran for hours past its
    last fault beside 2 busy loops on 2 cores. Returns the steps the job now ends at."""
    front = Progress(drill.events_dir).polled(whole=True).front()
    target = front + FINISH_STEPS
    if steps - front <= 4 * FINISH_STEPS or _ended(drill):  # it ends soon enough as it is (a quiet machine)
        return steps
    say(f"the schedule is over at step {front}: the job checkpoints and finishes at step {target}")
    drill.inject(drill.locate(0)[0], "preempt", grace_s=PREEMPT_GRACE_S)
    start_again(drill, paced_trainer(target, CKPT_EVERY, STEP_TIME_S), 2 * PREEMPT_GRACE_S + 60)
    return target


def start_again(drill: Any, trainer_args: list[str], bound_s: float) -> None:
    """After a preemption (every rank stops at the agreed step) or the loss of the node that held
    the job's store (every node ends): the job starts again on the same hosts, as a scheduler
    would, and resumes from its checkpoint. A user's script agrees on no step: the nodes left
    wait in the rendezvous for the one preempted, so ALONE_S after a node ended the others are
    stopped, as a scheduler ends a job that lost a node (a campaign on a script once waited
    out its bound there)."""
    codes = drill.wait_end(bound_s, ALONE_S)
    if any(code is None for code in codes.values()):
        raise LabError(f"the job had not stopped {bound_s:.0f}s after the fault: exit codes {codes}")
    drill.rerun(trainer_args)


def watch(progress: Progress, blow: Blow, world: int, job_ended, mark: int = 0) -> None:
    """Wait until every rank is two steps past the front at the fault, or the bound passes, or
    the job ends (checked once a second: it asks every node). mark: the steps read before the
    fault (Progress.mark), which no question here needs to look at again."""
    assert blow.time is not None
    deadline, asked = time.monotonic() + blow.bound_s, time.monotonic()
    while time.monotonic() < deadline:
        progress.poll()
        back = progress.all_reached(world, blow.front + 2, blow.time, mark)
        if back is not None:
            blow.recovered_s = max(0.0, back - blow.time)
            return
        if time.monotonic() - asked > 1.0:
            asked = time.monotonic()
            if ended := job_ended():
                blow.finding = f"the job ended before every rank was back: {ended}"
                return
        time.sleep(POLL_S)
    stood = progress.last_by_rank(blow.time, mark)
    behind = sorted(r for r in range(world) if stood.get(r, 0) < blow.front + 2)
    where = ", ".join(f"rank {r} at step {stood.get(r, 'none')}" for r in behind)
    blow.finding = f"not back within {blow.bound_s:.0f}s: {where} (the front was step {blow.front})"


def run(
    drill: Any, plan: list[Planned], trainer_args: list[str], ckpt_every: int, blows: list[Blow], say=print
) -> list[Blow]:
    """The campaign's faults on the running job, in order, kept in `blows` as they go (an
    interrupted campaign's ledger reads them); stops at the first finding, or when the job ends
    before the schedule does (the rest: not injected)."""
    world, pg_timeout = drill.topology.world_size, drill.topology.pg_timeout_s
    progress = Progress(drill.events_dir)
    drill.wait_for(lambda: progress.polled().front() >= 1, 240, "the job's first step")
    began = time.time()
    blows[:] = [Blow(p.kind, p.at_s, bound_s=bound_s(p.kind, pg_timeout)) for p in plan]
    for planned, blow in zip(plan, blows, strict=True):
        while time.time() - began < planned.at_s:
            time.sleep(POLL_S)
        if any(code is not None for code in drill.exit_codes().values()):
            break  # the job ended (or a node did): the rest are not injected
        landed, mark = len(drill.faults), progress.polled().mark()
        try:
            blow.ranks = strike(drill, progress, planned, world, ckpt_every)
        except LabError as e:
            blow.finding = f"could not inject: {e}"
            break
        blow.time = drill.faults[landed]["time"]  # the first blow's own clock
        # The front once the blow has landed whole, not at its first instant: a rank of a node
        # being killed can finish a step in the milliseconds between (a recovery was once
        # declared from such steps, before the node's ranks had started again).
        blow.front = progress.polled().front()
        if ends_the_job(drill, planned.kind, drill.faults[landed:]):
            start_again(drill, trainer_args, blow.bound_s)
        watch(progress, blow, world, lambda: _ended(drill), mark)
        if not blow.finding and KINDS[planned.kind].kills and not set(blow.ranks) <= progress.started_since(blow.time):
            missed = sorted(set(blow.ranks) - progress.started_since(blow.time))
            hit = [f.get("result") for f in drill.faults[landed:]]
            blow.finding = f"no new process for rank {missed} after the fault (it hit pid {hit}): it may have missed"
        say(_line(blow))
        if blow.finding:
            break
    return blows


def ends_the_job(drill: Any, kind: str, faults: list[dict]) -> bool:
    """Whether a blow's faults end the job, which the campaign then starts again: a preemption, or
    node 0 (the store's host) lost whole. The node lost is the one a kill_node hit, not the first
    fault's: lose-node-in-restart kills a rank, maybe of node 0, before it takes another node (a
    campaign in containers once waited for the end of a job that went on, and stopped)."""
    if KINDS[kind].stops_the_job:
        return True
    lost = [f["node"] for f in faults if f["fault"] == "kill_node"]
    return KINDS[kind].loses_a_node and any(loses_the_job(drill, node) for node in lost)


def _ended(drill: Any) -> str:
    """The nodes' exit codes once every node has ended, else ""."""
    codes = drill.exit_codes()
    return f"exit codes {codes}" if all(c is not None for c in codes.values()) else ""


def _line(blow: Blow) -> str:
    ranks = " and ".join(f"rank {r}" for r in blow.ranks)
    if blow.finding:
        return f"{blow.kind} on {ranks}: {blow.finding}"
    return f"{blow.kind} on {ranks} at step {blow.front}: every rank back in {blow.recovered_s:.2f}s"


def final_weights(drill: Any, trainer_args: list[str], job: Progress, blows: list[Blow]) -> dict[str, Any]:
    """The job's final checksums against an uninterrupted run of the same steps; when they
    differ, the first step whose loss differs, and the fault before it (lab.chaos.divergence);
    when the reference could not be run, why (the ledger is written either way)."""
    final = observe.final_checksums(drill.events())
    if not final:
        return {"identical": False, "why": "the job left no final weights (it did not complete)"}
    try:
        reference, source = drill.reference_checksums(trainer_args)
    except LabError as e:  # what the campaign ran is still told: a failed reference is no reason to lose it
        return {"identical": False, "final": sorted(final), "why": f"no uninterrupted reference to compare with: {e}"}
    if final == reference:
        return {"identical": True, "final": sorted(final), "reference": sorted(reference), "source": source, "why": ""}
    why = f"final checksums {sorted(final)} against the reference's {sorted(reference)}"
    ran = drill.runtime.run_dir.path / "reference" / "events"
    events = ran if source == "ran" else drill.run_reference(trainer_args)
    reference_run = Progress(events).polled(whole=True)
    first = divergence.first_difference(job, reference_run, blows) or divergence.redone_differently(job, blows)
    compared = divergence.compared(job, reference_run)
    why += f"; first: {first['why']}" if first else f"; the losses of all {compared} (rank, step) both ran agree"
    return {
        "identical": False,
        "final": sorted(final),
        "reference": sorted(reference),
        "source": source,
        "first_difference": first,
        "why": why,
    }
