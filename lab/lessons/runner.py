"""How a lesson exercise runs: whole small jobs on the lab's hosts, their output kept.

A fault drill breaks one long job; a lesson runs several short ones side by side (with
and without DDP, 2 and 4 processes, ...) and compares what they printed. Each job gets
fresh hosts from the local runtime and is taken down before the next; everything is
taken down at the end, also on error or Ctrl-C.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TextIO

from lab import gpus as machine_gpus
from lab import job, recovery, runtimes
from lab.report import Report
from lab.rundir import RunDir
from lab.topology import Topology
from lab.workloads import script_path

DEPTHS = ("beginner", "developer", "researcher")


@dataclass
class JobOutput:
    name: str
    codes: dict[str, int]
    lines: list[str]  # "[node0] text" (or "[python] text"), in the order they were read

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.codes.values())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def matches(self, pattern: str) -> list[re.Match]:
        regex = re.compile(pattern)
        return [m for line in self.lines if (m := regex.search(line))]


class Lesson:
    """What a lesson's run() works with: jobs to run and a report to fill."""

    def __init__(self, exercise, run_dir: RunDir, hosts: str, out=sys.stdout, gpus: int | None = None):
        self.exercise, self.run_dir, self.hosts, self.out = exercise, run_dir, hosts, out
        self.report = Report(exercise.NAME, "local", 0)
        # The GPUs the lesson's jobs may use: it picks its backend and its expectations from
        # this one number (LAB_GPU_COUNT fakes it), never from what the lesson's own process sees.
        self.gpus = machine_gpus.count() if gpus is None else gpus

    def progress(self, message: str) -> None:
        self.out.write(f"-- {message}\n")
        self.out.flush()

    def show(self, output: JobOutput, keep: int = 12) -> None:
        """Print what the learner would have seen (the last lines of it)."""
        for line in output.lines[-keep:]:
            self.out.write(f"   {line}\n")
        self.out.write(f"   exit codes {output.codes}\n")
        self.out.flush()

    def job(self, name: str, topology: Topology, script: str, args: Sequence[str] = ()) -> JobOutput:
        """Run `script` (a workload name or a path) across topology.nodes hosts; return its output."""
        topology = topology.replace(agent_metrics_port=0, rank_metrics_port=0)
        self.report.world_size = max(self.report.world_size, topology.world_size)
        self.progress(f"{name}: {topology.nodes} node(s) x {topology.nproc_per_node} process(es)")
        runtime = runtimes.create("local", self.run_dir, log=lambda m: None, hosts=self.hosts, monitoring="off")
        # The rendezvous `lab up` would choose for this job (the lab's, for these fixed-size jobs).
        topology, _ = recovery.choose(topology, recovery.AUTO, runtime.job_rendezvous())
        buffer = io.StringIO()
        try:
            topology, nodes = runtime.up(topology, _path(script), list(args))
            codes = job.wait(nodes, job.LogFollower(nodes, out=buffer), failure_grace_s=5.0, log=lambda m: None)
        finally:
            runtime.down(grace_s=5.0)
        output = JobOutput(name, codes, [line for line in buffer.getvalue().splitlines() if line.strip()])
        self.show(output)
        return output

    def python(self, name: str, script: str, args: Sequence[str] = ()) -> JobOutput:
        """`python script` without torchrun, as a learner who forgot it would type it."""
        self.progress(f"{name}: python {os.path.basename(_path(script))}")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
        }
        done = subprocess.run(
            [sys.executable, _path(script), *args], capture_output=True, text=True, timeout=300, env=env
        )
        lines = [f"[python] {line}" for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        output = JobOutput(name, {"python": done.returncode}, lines)
        self.show(output, keep=4)
        return output


def _path(script: str) -> str:
    return script if script.endswith(".py") else script_path(script)


def run_lesson(exercise: ModuleType, hosts: str, run_dir: RunDir, out: TextIO = sys.stdout) -> Report:
    """exercise.run(lesson) on the local runtime's hosts, then everything down, whatever happened."""
    lesson = Lesson(exercise, run_dir, hosts, out)
    runtime = runtimes.create("local", run_dir, log=lambda m: None, hosts=hosts, monitoring="off")
    # As every command that starts jobs: a running lab in this run dir is refused, not torn down.
    runtimes.begin_job(runtime, lambda message: print(message, file=out))
    try:
        exercise.run(lesson)
    finally:
        runtime.down(grace_s=5.0)
        run_dir.release()
    return lesson.report


def explain(exercise, depth: str) -> str:
    return f"{exercise.DEPTHS[depth].strip()}\n\nRun it:\n\n    {exercise.COMMAND}\n"
