"""`lab bench detection`: how long each detector takes to notice each fault, and false alarms.

    lab bench detection [--hosts netns|loopback] [--healthy-s 60]

Runs the fault drills one after another on 2 x 2 hosts with the lab's Prometheus, and
a healthy job of the same trainer. For each, the seconds from the fault until:

- torchelastic's monitor: an agent sees its workers fail (for a hang, this is the
  process-group timeout firing, then the agent noticing);
- the file-timer watchdog (hang-rank --watchdog 3): the agents end;
- each Prometheus alert: first pending, then firing (their `for:` clauses);
- forensics: how long collecting every rank's answer took (hang drills).

The healthy run lists any alert or failure record at all: a false alarm.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from lab import recovery, runtimes
from lab.bench.result import BenchResult, this_command
from lab.errors import LabError
from lab.exercises import DrillOptions, drills, observe
from lab.health.events import AgentEvent
from lab.health.prometheus import Prometheus
from lab.options import Option
from lab.report import Report
from lab.rundir import RunDir
from lab.runtimes.local import HOSTS
from lab.runtimes.monitored import MonitoredRuntime
from lab.topology import Topology
from lab.workloads import script_path

ALERTS = ("LabRankDown", "LabTrainingStalled", "LabRanksMissing", "LabRestartLoop", "LabStraggler")
# (row label, drill, its own flags, --recovery). Every job recovers through torchrun's agent, whose
# monitor is a column here: kill-worker and hang-rank ask for the restart (auto would recover them
# in-process, with no agent); the others' auto is a restart, or torch's rendezvous (partition-node).
# hang-rank --watchdog runs torchelastic's file timer, in the agent: auto settles a restart.
CASES: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("kill-worker --recovery restart", "kill-worker", {}, recovery.RESTART),
    ("hang-rank --recovery restart", "hang-rank", {}, recovery.RESTART),
    ("hang-rank --watchdog 3", "hang-rank", {"watchdog": 3}, recovery.AUTO),
    ("partition-node", "partition-node", {}, recovery.AUTO),
    ("straggler", "straggler", {}, recovery.AUTO),
)
HEALTHY = Option("--healthy-s", "how long the healthy job runs (default %(default)s)", 60.0, float, metavar="SECONDS")


class AlertWatch:
    """When each (alert, state) episode began, from Prometheus polled every half second: an
    alert already pending before a fault (start-up) is not counted as noticing it."""

    def __init__(self, prometheus: Prometheus):
        self.prometheus = prometheus
        self.episodes: dict[tuple[str, str], list[float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        present: set[tuple[str, str]] = set()
        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):  # not up yet, or already gone
                now = {(a["labels"]["alertname"], a["state"]) for a in self.prometheus.alerts()}
                for key in now - present:
                    self.episodes.setdefault(key, []).append(time.time())
                present = now

    def __enter__(self) -> AlertWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def after(self, since: float) -> dict[str, str]:
        """alert -> 'pending s / firing s': the first episode of each state that began after since."""
        out = {}
        for name in ALERTS:
            times = [
                min((t for t in self.episodes.get((name, state), []) if t >= since), default=None)
                for state in ("pending", "firing")
            ]
            if any(t is not None for t in times):
                out[name] = " / ".join("-" if t is None else f"{t - since:.1f}" for t in times)
        return out

    def fired(self) -> list[str]:
        return sorted({name for name, state in self.episodes if state == "firing"})


def drill_row(label: str, name: str, own: dict, style: str, hosts: str, tmp: Path) -> dict[str, Any]:
    from lab.exercises.engine import run_drill

    module = drills()[name]
    options = DrillOptions(module.DEFAULT_TARGET_RANK, module.DEFAULT_AT_STEP, own=own, recovery=style)
    runtime = watched_runtime(RunDir(tmp / label.replace(" ", "_")), hosts)
    seen: dict[str, Any] = {}

    def keep(report: Report, drill: Any) -> None:
        seen["agents"] = observe.agent_events(drill.events_dir)

    with AlertWatch(runtime.prometheus) as alerts:
        with open(os.devnull, "w") as quiet:
            report = run_drill(module, options, runtime, on_report=keep, out=quiet)
    fault = report.faults[0]["time"]
    monitor = observe.first_time(seen.get("agents", []), fault, lambda r: r["name"] == AgentEvent.FAILURE_DETECTED)
    found = report.facts.get("forensics") or {}
    return {
        "fault": label,
        "verdict": report.verdict,
        "monitor_s": round(monitor - fault, 1) if monitor else None,
        "watchdog_s": report.facts.get("seconds_until_the_agents_ended"),
        "alerts": alerts.after(fault),
        "forensics_s": found.get("seconds"),
        "forensics": found.get("finding"),
    }


def watched_runtime(run_dir: RunDir, hosts: str) -> MonitoredRuntime:
    """The local runtime's hosts with the lab's Prometheus, whose alerts the bench times."""
    runtime = runtimes.create("local", run_dir, log=lambda m: None, hosts=hosts, monitoring="on")
    assert isinstance(runtime, MonitoredRuntime)
    return runtime


def healthy_row(hosts: str, seconds: float, tmp: Path) -> dict[str, Any]:
    runtime = watched_runtime(RunDir(tmp / "healthy"), hosts)
    steps = int(seconds / 0.1)
    try:
        with AlertWatch(runtime.prometheus) as alerts:
            started = time.time()
            runtime.up(
                Topology(nodes=2, nproc_per_node=2, max_restarts=2),
                script_path("trainer"),
                ["--steps", str(steps), "--ckpt-every", "10", "--step-time", "0.1"],
            )
            time.sleep(seconds)
        agents = observe.agent_events(runtime.run_dir.path / "events")
    finally:
        runtime.down(grace_s=5)
    failures = [a for a in agents if a["name"] == AgentEvent.FAILURE_DETECTED]
    return {
        "fault": "none (healthy)",
        "alerts": alerts.after(started),
        "fired": alerts.fired(),
        "failures": len(failures),
    }


def add_arguments(p) -> None:
    HOSTS.but(default="netns").add_to(p)
    HEALTHY.add_to(p)


def run(args, out_dir: Path) -> BenchResult:
    if args.healthy_s <= 0:
        raise LabError("--healthy-s must be positive")
    rows = []
    with tempfile.TemporaryDirectory(prefix="lab-bench-") as tmp:
        for label, name, own, style in CASES:
            if name == "partition-node" and args.hosts != "netns":
                continue  # loopback nodes share one network: nothing to cut
            rows.append(drill_row(label, name, own, style, args.hosts, Path(tmp)))
            print(f"{label}: {rows[-1]}", flush=True)
        healthy = healthy_row(args.hosts, args.healthy_s, Path(tmp))
    print(f"healthy: {healthy}", flush=True)

    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    lines = [
        f"Seconds from the fault until each detector noticed ({args.hosts} hosts, 2 x 2, the trainer; "
        "alerts as pending / firing, after their `for:` clauses):",
        "",
        "| fault | verdict | torchelastic monitor | file-timer watchdog | forensics | " + " | ".join(ALERTS) + " |",
        "|---|---|---|---|---|" + "---|" * len(ALERTS),
    ]
    for row in rows:
        lines.append(
            f"| {row['fault']} | {row['verdict']} | {cell(row['monitor_s'])} | {cell(row['watchdog_s'])} | "
            f"{cell(row['forensics_s'])} | " + " | ".join(row["alerts"].get(a, "-") for a in ALERTS) + " |"
        )
    pending = ", ".join(f"{k} ({v})" for k, v in healthy["alerts"].items()) or "none"
    lines += [
        "",
        f"False alarms on a healthy {args.healthy_s:g} s job: alerts firing: {', '.join(healthy['fired']) or 'none'}; "
        f"agent failure records: {healthy['failures']}; pending at some point: {pending}.",
        "",
        "Forensics findings: " + "; ".join(f"{r['fault']}: {r['forensics']}" for r in rows if r.get("forensics")),
    ]
    return BenchResult(
        name="detection",
        command=this_command(),
        markdown=lines,
        figures={"rows": rows, "healthy": healthy},
    )
