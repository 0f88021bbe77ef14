"""`lab bench diagnosis`: `lab why` graded against faults injected at known ranks and steps.

    lab bench diagnosis [--classes kill,exception,...] [--positions first,middle,last]
                        [--at-steps 6,14] [--targets trainer,script] [--hosts loopback|netns]

Each cell is one 2 x 2 job with no restart budget: the lab's trainer, or an ordinary DDP
script with no lab import (lab/workloads/plain_train.py, watched through lab.node.user_script).
When the target rank has completed the cell's step, one signal goes to that rank's worker
through the node's own fault (Node.kill_worker), as a drill sends it; the job fails, and the
card `lab why` prints for the run dir (lab.why) is graded by lab.diagnosis: the rank it names,
the class of fault, the step. The score table counts right cells, "unknown" answers and
wrong ranks named with confidence, per fault class and overall.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from lab import evidence, files, runtimes, why
from lab.bench.diagnosis_table import table
from lab.bench.memory_cage import memory_cage
from lab.bench.result import BenchResult, this_command
from lab.diagnosis import FAULT_NAMES, FAULTS, Fault, Grade, grade
from lab.errors import LabError
from lab.health.events import Event, read_events
from lab.kernel_log import kernel_log
from lab.options import Option
from lab.rundir import RunDir
from lab.runtimes.local import HOSTS
from lab.topology import Topology
from lab.workloads import script_path

NODES, NPROC = 2, 2
PG_TIMEOUT_S, STEP_TIME, STEPS = 8, 0.05, 400
POSITIONS = {"first": 0, "middle": NODES * NPROC // 2, "last": NODES * NPROC - 1}
TARGETS = ("trainer", "script")
TRUTH = "truth.json"  # in a kept cell's evidence: what was injected, where and when
KERNEL_LOG = "kernel.log"  # and the kernel's lines on the rank, if it killed it
START_S = 120.0  # from `up` until the target rank completes the cell's step


def listed(name: str, choices: Sequence[str]):
    def parse(text: str) -> list[str]:
        chosen = [c.strip() for c in text.split(",") if c.strip()]
        unknown = [c for c in chosen if c not in choices]
        if unknown or not chosen:
            raise ValueError(f"{name}: choose from {', '.join(choices)}; got {text!r}")
        return chosen

    return parse


def steps_list(text: str) -> list[int]:
    steps = [int(s) for s in text.split(",") if s.strip()]
    if not steps or any(s < 1 or s >= STEPS // 2 for s in steps):
        raise ValueError(f"--at-steps: steps from 1 to {STEPS // 2 - 1}; got {text!r}")
    return steps


CLASSES = Option("--classes", "fault classes to inject, comma-separated (default: all)", ",".join(FAULT_NAMES))
POSITIONS_OPTION = Option("--positions", "ranks hit: first, middle, last (default: all)", ",".join(POSITIONS))
AT_STEPS = Option("--at-steps", "steps the fault fires after (default %(default)s)", "6,14")
TARGETS_OPTION = Option("--targets", "what the ranks run: trainer, script (default: both)", ",".join(TARGETS))
KEEP = Option("--keep", "keep each cell's evidence (lab.evidence: what its card was drawn from) under this folder", "")


def add_arguments(p) -> None:
    HOSTS.but(default="loopback").add_to(p)
    for option in (CLASSES, POSITIONS_OPTION, AT_STEPS, TARGETS_OPTION, KEEP):
        option.add_to(p)


def job(target: str, workdir: Path) -> tuple[Topology, str, list[str]]:
    """The cell's job: no restarts (the first failure ends it), a short process-group timeout,
    the lab's default rendezvous (its agents give a worker that ignores SIGTERM 5 s, not 30)."""
    topology = Topology(
        nodes=NODES,
        nproc_per_node=NPROC,
        rdzv_backend="lab",
        max_restarts=0,
        pg_timeout_s=PG_TIMEOUT_S,
        agent_metrics_port=0,  # no exporters: the card reads files only
        rank_metrics_port=0,
    )
    paced = ["--steps", str(STEPS), "--step-time", str(STEP_TIME)]
    if target == "trainer":
        return topology, script_path("trainer"), [*paced, "--ckpt-every", "0"]
    watched = topology.replace(script_wrapper=("--workdir", str(workdir)))
    return watched, script_path("plain_train"), [*paced, "--timeout-s", str(PG_TIMEOUT_S)]


def reached(events_dir: Path, rank: int, step: int, deadline: float) -> tuple[int, dict]:
    """Once the rank has completed `step`: its last step, and its start record (the node and
    local rank it runs as: the rendezvous, not the node's name, orders the nodes' ranks)."""
    while time.monotonic() < deadline:
        mine = [e for e in read_events(events_dir) if e["rank"] == rank]
        steps = [e["step"] for e in mine if e["event"] == Event.STEP]
        if steps and max(steps) >= step:
            return max(steps), [e for e in mine if e["event"] == Event.START][-1]
        time.sleep(0.05)
    raise LabError(f"rank {rank} never reached step {step} in {START_S:.0f} s: see {events_dir.parent}")


def ended(nodes, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(node.exit_code() is not None for node in nodes):
            return True
        time.sleep(0.1)
    return False


def cell(target: str, fault: Fault, rank: int, step: int, hosts: str, tmp: Path, keep: str) -> tuple[Grade, dict]:
    """One job broken once and graded; keep: a folder for the evidence the card was drawn from."""
    name = f"{target}-{fault.name}-r{rank}-s{step}"
    run_dir = RunDir(tmp / name)
    runtime = runtimes.create("local", run_dir, log=lambda m: None, hosts=hosts, monitoring="off")
    runtimes.begin_job(runtime, lambda m: None)
    try:
        topology, script, args = job(target, run_dir.path / "work")
        topology, nodes = runtime.up(topology, script, args)
        events_dir = run_dir.path / "events"
        at, start = reached(events_dir, rank, step, time.monotonic() + START_S)
        with memory_cage(start["pid"], name) if fault.caged else contextlib.nullcontext():
            next(n for n in nodes if n.name == start["node"]).kill_worker(start["local_rank"], fault.signal)
            finished = ended(nodes, 3 * PG_TIMEOUT_S + 30)
        kernel = kernel_log()
        card = why.card(run_dir.path, kernel=lambda: kernel)
        if keep:  # the folder says what was done to it: tests grade its card again (tests/unit)
            kept = evidence.keep(run_dir.path, Path(keep) / name)
            truth = {"target": target, "fault": fault.name, "rank": rank, "step": at}
            files.write_text(kept / TRUTH, json.dumps(truth) + "\n")
            said = [line for line in kernel.splitlines() if f"Killed process {start['pid']} " in line]
            if said:  # the kernel's own word on the rank, which a test cannot read from its machine
                files.write_text(kept / KERNEL_LOG, "\n".join(said) + "\n")
    finally:
        runtime.down(grace_s=5)
        run_dir.release()
    return grade(target, fault, rank, at, card), {"card": card.text(), "job_ended": finished}


def run(args, out_dir: Path) -> BenchResult:
    try:
        faults = [f for f in FAULTS if f.name in listed("--classes", FAULT_NAMES)(args.classes)]
        positions = listed("--positions", tuple(POSITIONS))(args.positions)
        targets = listed("--targets", TARGETS)(args.targets)
        steps = steps_list(args.at_steps)
    except ValueError as e:
        raise LabError(str(e)) from None
    cells = [(t, f, p, s) for t in targets for f in faults for p in positions for s in steps]
    grades, seen = [], []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lab-bench-diagnosis-") as tmp:
        for n, (target, fault, position, step) in enumerate(cells, 1):
            result, extra = cell(target, fault, POSITIONS[position], step, args.hosts, Path(tmp), args.keep)
            grades.append(result)
            seen.append({**result.to_json(), **extra})
            mark = "right" if result.right else "WRONG RANK" if result.wrong_rank else "missed"
            print(
                f"[{n}/{len(cells)}] {target} {fault.name} rank {result.rank} step {result.step}: {mark} "
                f"(named rank {result.named_rank}, {result.named_kind}, step {result.named_step})",
                flush=True,
            )
    minutes = (time.monotonic() - started) / 60
    return BenchResult(
        name="diagnosis",
        command=this_command(),
        markdown=table(grades, faults, args.hosts, minutes),
        figures={"cells": seen, "minutes": round(minutes, 1)},
    )
