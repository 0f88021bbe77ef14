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
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from lab import job, recovery, runtimes
from lab.exercises.observe import first_time
from lab.health.events import Event, read_agent_events, read_events
from lab.rundir import RunDir
from lab.topology import Topology
from lab.workloads import script_path

STAGES = ("agent", "rendezvous", "worker", "group", "first_step", "total")


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
    """Start the trainer for a few steps on fresh hosts, wait for it, read its stages."""
    with tempfile.TemporaryDirectory(prefix="lab-bench-stages-") as tmp:
        run_dir = RunDir(Path(tmp) / "run")
        runtime = runtimes.create("local", run_dir, log=lambda m: None, hosts=hosts, monitoring="off")
        topology, _ = recovery.choose(Topology(nodes=2, nproc_per_node=2), recovery.AUTO, runtime.job_rendezvous())
        runtimes.begin_job(runtime, lambda m: None)
        try:
            launched = time.time()
            _, nodes = runtime.up(topology, script_path("trainer"), ["--steps", "3", "--ckpt-every", "0"])
            job.wait(nodes, None, failure_grace_s=5.0, log=lambda m: None)
            events_dir = run_dir.path / "events"
            return stages(launched, list(read_events(events_dir)), read_agent_events(events_dir))
        finally:
            runtime.down(grace_s=5.0)
            run_dir.release()


def table(runs: list[dict[str, float | None]]) -> list[str]:
    """The median of each stage over the runs, as markdown rows."""
    lines = ["| stage | median s | range |", "|---|---|---|"]
    for name in STAGES:
        values = [v for r in runs if (v := r[name]) is not None]
        if values:
            lines.append(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f}-{max(values):.2f} |")
        else:
            lines.append(f"| {name} | - | not recorded |")
    return lines
