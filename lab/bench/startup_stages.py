"""Where start-up goes: from the launch to the first step, stage by stage.

The lab's trainer on 2 nodes x 2 workers, started as `lab up` starts a job (the local
runtime, the recovery style `--recovery auto` picks), its events and its agents' records
read back afterwards. The earliest node counts at each stage:

    agent      launch until an agent asks to join the rendezvous: the node's python and
               torch imported, the fork server forked
    rendezvous until that agent has joined the round
    worker     until a worker has started (forked from the server once its preload list is
               imported, the trainer running)
    group      until a worker has its process group (init_process_group)
    first_step until the first completed step (the optimizer's first step included)

and how long the job a chaos campaign runs (paced, under in-process recovery) takes to end
once it steps and a node is preempted, as `lab chaos` preempts one (SIGTERM to node 1's agent,
SIGKILL after PREEMPT_GRACE_S):

    end        the SIGTERM until every node has exited: the ranks agree on a step, checkpoint
               it and stop, and every agent (or keeper) exits. A job started again after a
               preemption or a lost store waits for this before its start (lab bench goodput
               projects a campaign's restarts from both).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lab import job, recovery, runtimes
from lab.chaos.campaign import CKPT_EVERY, STEP_TIME_S
from lab.chaos.strikes import PREEMPT_GRACE_S
from lab.errors import LabError
from lab.exercises.drill import paced_trainer
from lab.exercises.observe import first_time
from lab.health.events import Event, read_agent_events, read_events
from lab.rundir import RunDir
from lab.runtimes.base import Runtime
from lab.topology import Topology
from lab.workloads import script_path

STAGES = ("agent", "rendezvous", "worker", "group", "first_step", "total")
END = "end"  # the job's end once a node is preempted (one_start)
STEPS = 2000  # paced as the chaos campaign paces its job: still stepping when it is preempted


def stages(launched: float, events: list[dict], agents: list[dict]) -> dict[str, float | None]:
    """Seconds per stage of one start (None where a record is missing)."""
    asked = first_time(agents, launched, lambda r: "attempts to join" in r["message"])
    joined = first_time(agents, asked or launched, lambda r: "has joined round" in r["message"])
    started = first_time(events, joined or launched, lambda e: e["event"] == Event.START)
    grouped = first_time(events, started or launched, lambda e: e["event"] == Event.RENDEZVOUS_DONE)
    stepped = first_time(events, grouped or launched, lambda e: e["event"] == Event.STEP)
    marks = [("agent", launched, asked), ("rendezvous", asked, joined), ("worker", joined, started)]
    marks += [("group", started, grouped), ("first_step", grouped, stepped), ("total", launched, stepped)]
    return {name: (end - start if start is not None and end is not None else None) for name, start, end in marks}


def one_start(hosts: str) -> dict[str, float | None]:
    """Start the trainer for a few steps on fresh hosts, wait for it, read its stages; then the
    job's end once a node is preempted (one_end)."""
    with _fresh_job(hosts) as (runtime, run_dir):
        topology, _ = recovery.choose(Topology(nodes=2, nproc_per_node=2), recovery.AUTO, runtime.job_rendezvous())
        launched = time.time()
        _, nodes = runtime.up(topology, script_path("trainer"), ["--steps", "3", "--ckpt-every", "0"])
        job.wait(nodes, None, failure_grace_s=5.0, log=lambda m: None)
        events_dir = run_dir.path / "events"
        found = stages(launched, list(read_events(events_dir)), read_agent_events(events_dir))
    return {**found, END: one_end(hosts)}


def one_end(hosts: str) -> float:
    """The seconds from a SIGTERM to node 1's agent until every node has exited, of the job a chaos
    campaign runs: paced as it paces it, under in-process recovery (its style on the trainer)."""
    with _fresh_job(hosts) as (runtime, run_dir):
        two_by_two = Topology(nodes=2, nproc_per_node=2)
        # The lab's trainer recovers in-process (it uses lab.inprocess): nothing to refuse.
        topology, _ = recovery.choose(two_by_two, recovery.IN_PROCESS, runtime.job_rendezvous(), in_process_refusal="")
        _, nodes = runtime.up(topology, script_path("trainer"), paced_trainer(STEPS, CKPT_EVERY, STEP_TIME_S))
        _wait_for_a_step(run_dir.path / "events", nodes)
        stopped = time.time()
        nodes[-1].preempt(grace_s=PREEMPT_GRACE_S)
        job.wait(nodes, None, poll_s=0.02, failure_grace_s=5.0, log=lambda m: None)
        return time.time() - stopped


@contextmanager
def _fresh_job(hosts: str) -> Iterator[tuple[Runtime, RunDir]]:
    """A local runtime on a run dir of its own, with no Prometheus; torn down whatever happens."""
    with tempfile.TemporaryDirectory(prefix="lab-bench-stages-") as tmp:
        run_dir = RunDir(Path(tmp) / "run")
        runtime = runtimes.create("local", run_dir, log=lambda m: None, hosts=hosts, monitoring="off")
        runtimes.begin_job(runtime, lambda m: None)
        try:
            yield runtime, run_dir
        finally:
            runtime.down(grace_s=5.0)
            run_dir.release()


def _wait_for_a_step(events_dir: Path, nodes, timeout_s: float = 240.0) -> None:
    """Until a rank has completed a step; a job that ended first, or never steps, is an error."""
    deadline = time.monotonic() + timeout_s
    while not any(e["event"] == Event.STEP for e in read_events(events_dir)):
        codes = [node.exit_code() for node in nodes]
        if any(code is not None for code in codes) or time.monotonic() > deadline:
            raise LabError(f"the trainer never stepped (nodes' exit codes {codes}): no start-up stages")
        time.sleep(0.05)


def table(runs: list[dict[str, float | None]]) -> list[str]:
    """The median of each stage over the runs, as markdown rows."""
    lines = ["| stage | median s | range |", "|---|---|---|"]
    for name in (*STAGES, END):
        values = [v for r in runs if (v := r.get(name)) is not None]
        if values:
            lines.append(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f}-{max(values):.2f} |")
        else:
            lines.append(f"| {name} | - | not recorded |")
    return lines
