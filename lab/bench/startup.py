"""`lab bench startup`: time from the launch command to the first completed training step.

    lab bench startup [--trials 3]

Runs the lesson's 2-node x 2-process job several ways, interleaved trial by trial so
machine noise hits all of them alike: two bare `torchrun` agents started by hand on
loopback; `lab up` on loopback and on netns hosts without Prometheus (the same job);
and `lab up` as a user runs it, on netns hosts with its Prometheus server; and, when a
Docker daemon answers and the cpu image is built, `lab up --runtime docker` with warm
images, with and without its Prometheus container. Each lab trial is followed by
`lab down`. Prints the median and range of each and the lab's overhead against bare
torchrun.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lab.bench import CAMPAIGN_LOAD, LOAD_HELP, QUIET_GOALS, TRIALS, beside, free_port, loaded, startup_stages
from lab.bench.result import BenchResult, goal_line, this_command
from lab.chaos import load, schedule
from lab.errors import LabError
from lab.workloads import script_path

FIRST_STEP = b"step 0 loss"


def time_to_line(commands: list[list[str]], env: dict[str, str], marker: bytes = FIRST_STEP) -> float:
    """Start every command at once; seconds until any prints marker. All are waited for."""
    start = time.monotonic()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env) for c in commands]
    elapsed = None
    try:
        for line in procs[0].stdout or ():  # rank 0's node prints the loss
            if marker in line and elapsed is None:
                elapsed = time.monotonic() - start
        for p in procs:
            p.wait(timeout=120)
    finally:
        for p in procs:
            p.kill()
            if p.stdout:
                p.stdout.close()
    if elapsed is None or any(p.returncode for p in procs):
        raise RuntimeError(f"job failed: exit codes {[p.returncode for p in procs]}")
    return elapsed


def lab_up(run_dir: str, *options: str) -> list[list[str]]:
    return [[sys.executable, "-m", "lab", "up", "--run-dir", run_dir, "--rdzv-port", str(free_port()), *options]]


def lab_down(run_dir: str) -> None:
    subprocess.run([sys.executable, "-m", "lab", "down", "--run-dir", run_dir], capture_output=True, timeout=120)


def bare_torchrun(tmp: str) -> list[list[str]]:
    endpoint = f"127.0.0.1:{free_port()}"
    return [
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=2",
            f"--log-dir={tmp}/torchrun-{i}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-conf=is_host={int(i == 0)}",
            script_path("ddp_train"),
        ]
        for i in range(2)
    ]


def docker_ready() -> bool:
    """A daemon answers and the node image is built (the bench measures warm images only)."""
    from lab.runtimes import docker_engine

    try:
        docker_engine.client().images.get(docker_engine.NODE_IMAGE)
        return True
    except Exception:  # no daemon, no SDK, no image: the Docker rows are left out
        return False


def sections() -> list[str]:
    """The quiet figures, and those beside a campaign's load (lab bench goodput projects a campaign from both)."""
    return ["startup", loaded("startup", CAMPAIGN_LOAD)]


def lab_variants(run_dir: str) -> dict[str, Callable[[], list[list[str]]]]:
    """The ways `lab up` starts the job here: loopback always, netns hosts as root, Docker where ready."""
    variants = {
        "lab up (loopback, no Prometheus)": lambda: lab_up(run_dir, "--hosts", "loopback", "--prometheus", "off"),
    }
    if os.geteuid() == 0:
        variants["lab up (netns hosts, no Prometheus)"] = lambda: lab_up(
            run_dir, "--hosts", "netns", "--prometheus", "off"
        )
        variants["lab up (netns hosts, Prometheus)"] = lambda: lab_up(run_dir, "--hosts", "netns")
    if docker_ready():
        variants["lab up --runtime docker (no Prometheus)"] = lambda: lab_up(
            run_dir, "--runtime", "docker", "--prometheus", "off"
        )
        variants["lab up --runtime docker (Prometheus)"] = lambda: lab_up(run_dir, "--runtime", "docker")
    return variants


def add_arguments(p) -> None:
    TRIALS.add_to(p)
    schedule.LOAD.but(help=LOAD_HELP).add_to(p)


def run(args, out_dir: Path) -> BenchResult:
    if args.trials < 1:
        raise LabError("--trials must be at least 1")
    schedule.check_load(args.load)
    env = dict(os.environ)
    bare = "bare torchrun (loopback)"
    with tempfile.TemporaryDirectory(prefix="lab-bench-") as tmp, load.busy(args.load, None):
        run_dir = f"{tmp}/run"
        variants = {bare: lambda: bare_torchrun(tmp), **lab_variants(run_dir)}
        times: dict[str, list[float]] = {name: [] for name in variants}
        for trial in range(args.trials):
            for name, commands in variants.items():
                try:
                    times[name].append(time_to_line(commands(), env))
                finally:
                    if name != bare:
                        lab_down(run_dir)
                print(f"trial {trial + 1}: {name}: {times[name][-1]:.2f} s", flush=True)
        hosts = "netns" if os.geteuid() == 0 else "loopback"
        stage_runs = [startup_stages.one_start(hosts) for _ in range(args.trials)]  # beside the same load
    base = statistics.median(times[bare])
    lines = [
        f"{beside(args.load)}Seconds from the launch command to the first step, median of {args.trials} "
        "interleaved trials, the lesson's script on 2 nodes x 2 processes:",
        "",
        "| how | median | range | x bare torchrun |",
        "|---|---|---|---|",
    ]
    figures: dict[str, object] = {}
    for name, values in times.items():
        median = statistics.median(values)
        figures[name] = {"median_s": median, "trials": values}
        lines.append(f"| {name} | {median:.2f} s | {min(values):.2f}-{max(values):.2f} | {median / base:.2f}x |")
    figures["stages"] = stage_runs
    lines += [
        "",
        f"Where it goes: the lab's trainer started as `lab up` starts it, and its end once a node is "
        f"preempted, median of {args.trials} (lab/bench/startup_stages.py names the stages):",
        "",
        *startup_stages.table(stage_runs),
        "",
    ]
    for where, share, matches in GOALS if not args.load else ():
        ratios = [statistics.median(v) / base for n, v in times.items() if n != bare and matches(n)]
        if ratios:
            worst = max(ratios)
            lines.append(goal_line(f"start-up {where} within {share}x bare torchrun", worst <= share, f"{worst:.2f}x"))
    if args.load:
        lines.append(QUIET_GOALS)
    figures["load"] = args.load
    return BenchResult(loaded("startup", args.load), this_command(), lines, figures)


# Issue 31's goals: (where, the most start-up may be as a share of bare torchrun's, which rows).
GOALS = (
    ("on this machine's hosts", 0.5, lambda name: "docker" not in name),
    ("in containers", 0.6, lambda name: "docker" in name),
)
