"""`lab bench recovery`: kill a worker, time until the restarted group's first step, lab vs bare.

The lab's job and a bare torchrun job of the same trainer, alternately.

    lab bench recovery [--trials 5] [--hosts loopback|netns]

Both run the trainer on 2 nodes x 2 workers with --max-restarts 2 and the restart
workaround (bare torchrun never recovers without it). When rank 1 reaches step 25
it is SIGKILLed; the figure is the time from the kill to the first completed step of
the restarted group, read from the event log, with the lab's breakdown by stage.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.bench import TRIALS, free_port
from lab.bench.result import BenchResult, goal_line, this_command
from lab.errors import LabError
from lab.exercises import observe
from lab.health.events import read_events
from lab.rundir import RunDir
from lab.runtimes.local import HOSTS, LocalRuntime
from lab.topology import Topology
from lab.workloads import script_path

TRAINER_ARGS = ["--steps", "40", "--ckpt-every", "10", "--step-time", "0.1"]


def kill_and_time(events_dir: Path, timeout_s: float = 180) -> tuple[float, dict]:
    """Kill rank 1's worker at step 25; seconds until the restarted group's first step."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        events = list(read_events(events_dir)) if events_dir.exists() else []
        if any(e["event"] == "step" and e["rank"] == 1 and e["step"] >= 25 for e in events):
            break
        time.sleep(0.05)
    pid = next(e["pid"] for e in reversed(events) if e["event"] == "start" and e["rank"] == 1)
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    while time.monotonic() < deadline:
        events = list(read_events(events_dir))
        first = [e["time"] for e in events if e["event"] == "step" and e["restart"] == 1]
        if first:
            return min(first) - killed, observe.recovery_breakdown(events, observe.agent_events(events_dir), killed)
        time.sleep(0.05)
    raise RuntimeError("the job did not recover")


def lab_trial(tmp: Path, hosts: str) -> tuple[float, dict]:
    runtime = LocalRuntime(RunDir(tmp / "lab-run"), hosts=hosts, monitoring="off", log=lambda m: None)
    try:
        runtime.up(Topology(nodes=2, nproc_per_node=2, max_restarts=2), script_path("trainer"), TRAINER_ARGS)
        return kill_and_time(runtime.run_dir.path / "events")
    finally:
        runtime.down(grace_s=5)


def bare_trial(tmp: Path) -> tuple[float, dict]:
    events, port = tmp / f"bare-events-{time.time()}", free_port()
    # TMPDIR: a killed worker's pytorch-errorfile-*.pickle stays in the bench's own temp dir.
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "TMPDIR": str(tmp)}
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=2",
                "--max-restarts=2",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}",
                f"--rdzv-conf=is_host={int(i == 0)}",
                f"--log-dir={tmp}/bare-logs-{i}-{port}",
                script_path("trainer"),
                *TRAINER_ARGS,
                "--ckpt-dir",
                str(events) + "-ckpt",
                "--events-dir",
                str(events),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for i in range(2)
    ]
    try:
        return kill_and_time(events)
    finally:
        for agent in agents:
            try:
                os.killpg(agent.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for agent in agents:
            agent.wait(60)


def add_arguments(p) -> None:
    TRIALS.but(default=5).add_to(p)
    HOSTS.but(default="loopback").add_to(p)


def run(args, out_dir: Path) -> BenchResult:
    if args.trials < 1:
        raise LabError("--trials must be at least 1")
    lab, bare, stages = [], [], []
    with tempfile.TemporaryDirectory(prefix="lab-bench-") as tmp:
        for i in range(args.trials):
            seconds, breakdown = lab_trial(Path(tmp), args.hosts)
            lab.append(seconds)
            stages.append(breakdown)
            bare.append(bare_trial(Path(tmp))[0])
            print(f"trial {i + 1}: lab {lab[-1]:.2f} s, bare torchrun {bare[-1]:.2f} s", flush=True)
    lab_median, bare_median = statistics.median(lab), statistics.median(bare)
    medians = {k: statistics.median(s[k] for s in stages if s[k] is not None) for k in stages[0]}
    lines = [
        f"Kill to the first step after the restart, median of {args.trials} alternating trials "
        f"({args.hosts} hosts, 2 x 2, the trainer, `--max-restarts 2`, bare torchrun with the restart workaround):",
        "",
        "| job | median | range |",
        "|---|---|---|",
        f"| lab | {lab_median:.2f} s | {min(lab):.2f}-{max(lab):.2f} |",
        f"| bare torchrun | {bare_median:.2f} s | {min(bare):.2f}-{max(bare):.2f} |",
        "",
        "The lab's breakdown, medians: " + ", ".join(f"{k} {v:.2f}" for k, v in medians.items()) + " s.",
        goal_line(
            "recovery faster than bare torchrun, target half its time",
            lab_median <= bare_median / 2,
            f"{100 * lab_median / bare_median:.0f}% of bare torchrun's time",
        ),
    ]
    figures = {"lab_s": lab_median, "bare_s": bare_median, "lab_trials": lab, "bare_trials": bare, "breakdown": medians}
    return BenchResult("recovery", this_command(), lines, figures)
