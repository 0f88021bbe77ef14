"""Start-up cost: time from the launch command to the first completed training step.

    python -m lab.bench.startup [--trials 3]

Runs the lesson's 2-node x 2-process job three ways, interleaved trial by trial so
machine noise hits all of them alike: `lab run` on netns hosts, `lab run` on
loopback, and two bare `torchrun` agents started by hand on loopback. Prints the
median and range of each and the lab's overhead against bare torchrun.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from lab.workloads import script_path

FIRST_STEP = b"step 0 loss"


def time_to_line(commands: list[list[str]], env: dict[str, str], marker: bytes = FIRST_STEP) -> float:
    """Start every command at once; seconds until any prints marker. All are waited for."""
    start = time.monotonic()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env) for c in commands]
    elapsed = None
    try:
        for line in procs[0].stdout:  # rank 0's node prints the loss
            if marker in line and elapsed is None:
                elapsed = time.monotonic() - start
        for p in procs:
            p.wait(timeout=120)
    finally:
        for p in procs:
            p.kill()
            p.stdout.close()
    if elapsed is None or any(p.returncode for p in procs):
        raise RuntimeError(f"job failed: exit codes {[p.returncode for p in procs]}")
    return elapsed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lab_run(hosts: str, run_dir: str) -> list[list[str]]:
    return [[sys.executable, "-m", "lab", "run", "--hosts", hosts, "--run-dir", run_dir,
             "--rdzv-port", str(free_port()), script_path("ddp_train")]]


def bare_torchrun(tmp: str) -> list[list[str]]:
    endpoint = f"127.0.0.1:{free_port()}"
    return [[sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
             f"--log-dir={tmp}/torchrun-{i}",
             "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-conf=is_host={int(i == 0)}",
             script_path("ddp_train")] for i in range(2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="lab-bench-") as tmp:
        variants = {"bare torchrun (loopback)": lambda: bare_torchrun(tmp)}
        variants["lab run (loopback)"] = lambda: lab_run("loopback", tmp)
        if os.geteuid() == 0:
            variants["lab run (netns hosts)"] = lambda: lab_run("netns", tmp)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for trial in range(args.trials):
            for name, commands in variants.items():
                times[name].append(time_to_line(commands(), env))
                print(f"trial {trial + 1}: {name}: {times[name][-1]:.2f} s", flush=True)
    base = statistics.median(times["bare torchrun (loopback)"])
    print(f"\nmedian seconds from launch to the first step ({args.trials} trials, 2 nodes x 2 processes)")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<26} {median:6.2f}  (range {min(values):.2f}-{max(values):.2f})  "
              f"{100 * (median / base - 1):+5.1f}% vs bare torchrun")


if __name__ == "__main__":
    main()
