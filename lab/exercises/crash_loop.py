"""crash-loop: a restart budget that counts progress, tried both ways.

Hypothesis: under the lab's agent, `--max-restarts K` counts restarts in a row without
progress (lab/node/restart_budget.py), not restarts. So:

1. a job that makes progress between faults outlives its budget: the target rank is killed
   K+1 times, each time once the job has reached a step it had never reached before, and the
   job still completes, bit-identical to an uninterrupted run (torchrun's own count would
   have stopped it at the K+1-th kill);
2. a job that cannot make progress stops within K restarts: in the same job started afresh,
   the target rank is killed every time it starts, before its first step (the trainer waits
   START_DELAY_S after joining, a slow data loader's warm-up, so the kill lands first). After K restarts
   the agent stops, exits 86 and says "crash loop: no progress in K restarts", within
   seconds, instead of a slow burn.

    lab exercise run crash-loop [--max-restarts K] [--target-rank 1]

Look for: the agent's "crash loop: no progress in 3 restarts" line in the node log, node
exit code 86, and on Kubernetes the Job's pod failure policy failing the Job at that code
(k8s/base/job.yaml), so that a new pod cannot start the count again.
"""

from __future__ import annotations

import signal
import time

from lab.errors import LabError
from lab.exercises import drill_job, observe
from lab.exercises.drill import aimed, paced_trainer
from lab.exercises.seen import Seen
from lab.health.events import Event, read_events
from lab.node.restart_budget import CRASH_LOOP_EXIT
from lab.report import Report
from lab.topology import Topology

NAME = "crash-loop"
SUMMARY = "kill a rank K+1 times with progress between (the job survives), then at every start (it stops in K)"
INJECTS = ("kill_worker",)  # Node faults it uses (lab.exercises.grid)
DEFAULT_TARGET_RANK, DEFAULT_AT_STEP = 1, 12
STEPS, CKPT_EVERY, GAP = 60, 5, 8  # a kill every GAP steps of new ground: K+1 kills fit in STEPS for K <= 5
BUDGET = 3
# How long a worker waits to join its group. The last kill ends node 0's agent, and the store it
# hosts for the workers with it: a worker of another node that starts after that (a slow start on
# a loaded machine) waits to connect until this runs out, twice (seen: 2 minutes at the default
# 60 s, past the drill's wait for the job to end). Steps here take 0.1 s.
PG_TIMEOUT_S = 15
LOG_TAIL = 6000
# Phase 2's trainer waits this long after joining, before its first step: the kill follows a
# start event by a poll and a signal, and must land before the rank's first all-reduce, or the
# others' step 1 is progress and refills the budget. With no wait, the lab's preloaded workers
# reached it 0.06 s after their start, and a CI run saw a step first: the job outlived its kills.
START_DELAY_S = 5.0
NO_SCRIPT = "its verdict needs the job's steps and checkpoints as the lab's trainer reports them (use kill-worker)"


def topology(options) -> Topology:
    if options.torch_defaults:
        raise LabError(
            "crash-loop with --torch-defaults: torch's restarts fail first for another reason "
            "(pytorch/pytorch#135712); kill-worker --torch-defaults shows that"
        )
    budget = BUDGET if options.max_restarts is None else options.max_restarts
    most = (STEPS - 1 - options.at_step) // GAP
    if not 1 <= budget <= most:
        raise LabError(
            f"crash-loop with --max-restarts {budget}: it kills a rank K+1 times, {GAP} steps apart from step "
            f"{options.at_step}, in a {STEPS}-step job; use --max-restarts 1 to {most}"
        )
    return drill_job(options, max_restarts=budget, pg_timeout_s=PG_TIMEOUT_S)


def trainer_args(options) -> list[str]:
    return paced_trainer(STEPS, CKPT_EVERY)


def kill(drill, rank: int, node: str, local_rank: int) -> dict:
    """SIGKILL the rank's worker; a worker just started may not be in its agent's record yet."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return aimed(drill.inject(node, "kill_worker", local_rank=local_rank, sig=int(signal.SIGKILL)), rank)
        except LabError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def outlive(drill, options, budget: int) -> Seen:
    """Phase 1: K+1 kills, each on new ground; the job should complete."""
    step = options.at_step
    for _ in range(budget + 1):
        node, local_rank = drill.reach(options.target_rank, step)
        kill(drill, options.target_rank, node, local_rank)
        step += GAP
    return drill.gather(NAME, 240, reference=trainer_args(options))


def crash_at_every_start(drill, options, budget: int) -> Seen:
    """Phase 2: the same job afresh, its target rank killed at each start before a step."""
    drill.progress("starting the job afresh; the target rank dies each time it starts")
    first_fault = len(drill.faults)
    events_dir = drill.rerun([*trainer_args(options), "--start-delay", str(START_DELAY_S)], fresh=NAME)
    started = time.time()
    rank = options.target_rank
    for restart in range(budget + 1):
        what = f"rank {rank} to start (restart {restart})"
        start = drill.wait_for(lambda r=restart: _start(events_dir, rank, r), 120, what)
        kill(drill, rank, start["node"], start["local_rank"])
    codes = drill.wait_job(120)
    seen = Seen(NAME, drill.runtime.name, drill.topology, faults=drill.faults[first_fault:], codes=dict(codes))
    seen.events, seen.agents = _events(events_dir), observe.agent_events(events_dir)
    seen.logs = {node: log[-LOG_TAIL:] for node, log in drill.node_logs().items()}  # the agent's last word
    seen.extra["stopped_after_s"] = round(time.time() - started, 2)
    return seen


def _start(events_dir, rank: int, restart: int) -> dict | None:
    starts = (e for e in _events(events_dir) if e["event"] == Event.START and e["rank"] == rank)
    return next((e for e in starts if e["restart"] == restart), None)


def _events(directory) -> list[dict]:
    return list(read_events(directory)) if directory.exists() else []


def run(drill, options) -> Report:
    budget = drill.topology.max_restarts
    outlived = outlive(drill, options, budget)
    seen = crash_at_every_start(drill, options, budget)
    seen.extra["outlived"] = outlived.to_json()
    seen.faults = [*outlived.faults, *seen.faults]
    return judge(seen, options)


def judge(seen: Seen, options) -> Report:
    report = seen.new_report()
    budget = seen.topology.max_restarts
    outlived = Seen.from_json(seen.extra["outlived"])
    survived_restarts = observe.restarts(outlived.events)
    report.facts["budget"] = budget
    report.facts["restarts"] = survived_restarts
    report.check(
        f"with progress between them, {budget + 1} faults did not stop the job (budget {budget})",
        all(c == 0 for c in outlived.codes.values()) and survived_restarts == budget + 1,
        f"exit codes {outlived.codes}, restarts {survived_restarts}",
    )
    observe.judge_reference(report, outlived)
    looped = observe.restarts(seen.events)
    stepped = [e["step"] for e in seen.events if e["event"] == Event.STEP]
    report.facts["crash_loop_restarts"] = looped
    report.facts["crash_loop_stopped_after_s"] = seen.extra.get("stopped_after_s")
    report.check(
        f"killed at every start, the job stopped after {budget} restarts",
        looped == budget and not stepped,
        f"restarts {looped}, steps completed {len(stepped)}",
    )
    report.check(
        f"an agent exited {CRASH_LOOP_EXIT} (crash loop)",
        CRASH_LOOP_EXIT in seen.codes.values(),
        f"exit codes {seen.codes}",
    )
    said = f"crash loop: no progress in {budget} restarts"
    report.check("the agent said why", any(said in log for log in seen.logs.values()), f"looked for {said!r}")
    report.explanation = (
        f"--max-restarts {budget} counts restarts without progress: {survived_restarts} faults on new ground were "
        f"survived, and a rank that died at every start stopped the job after {looped} restarts, "
        f"{seen.extra.get('stopped_after_s')} s after it was started afresh"
    )
    return report
