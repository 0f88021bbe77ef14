"""One cell of `lab bench diagnosis`: a 2 x 2 job broken once by a signal, and its card graded.

The job has no restart budget (the first failure ends it) and a short process-group timeout;
it runs the lab's default rendezvous, whose agents give a worker that ignores SIGTERM 5 s,
not torch's 30. When the target rank has completed the cell's step, the signal goes to that
rank's worker through the node's own fault (Node.kill_worker), as a drill sends it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lab import files, runtimes
from lab.bench import flight_recorder, free_port, up_on_its_own_port
from lab.bench.cages import memory_cage
from lab.bench.grading import Fault, Grade, grade
from lab.errors import LabError
from lab.exercises import forensics
from lab.health import stragglers
from lab.health.events import Event, read_events
from lab.kernel_log import kernel_log
from lab.rundir import RunDir
from lab.topology import Topology
from lab.why import card as why
from lab.why import evidence
from lab.workloads import checkpoint_files, script_path

NODES, NPROC = 2, 2
PG_TIMEOUT_S, STEP_TIME, STEPS = 8, 0.05, 400
TRUTH = "truth.json"  # in a kept cell's evidence: what was injected, where and when
KERNEL_LOG = "kernel.log"  # and the kernel's lines on the rank, if it killed it
START_S = 120.0  # from `up` until the target rank completes the cell's step
SCRIPT_RESUMES = "--snapshot-every"  # plain_train's snapshot: rank 0 writes it, every rank resumes from it
SLOWED_STEPS = 30  # a straggler: the steps after the fault within which it must be named (the goal's 20, and more)
HANG_SETTLE_S = 2.0  # a hang's fault to its ranks' dumps: the others reach their collective (PG_TIMEOUT_S ends it)


@dataclass(frozen=True)
class Cell:
    target: str  # "trainer" or "script"
    fault: Fault
    rank: int
    step: int

    @property
    def name(self) -> str:
        return f"{self.target}-{self.fault.name}-r{self.rank}-s{self.step}"


def cell_topology(**more) -> Topology:
    """A bench cell's 2 x 2 job: on a rendezvous port of its own (cells run side by side,
    --side-by-side), no restarts, and no exporters (what the cell judges is in the run dir's files)."""
    return Topology(
        nodes=NODES,
        nproc_per_node=NPROC,
        rdzv_backend="lab",
        rdzv_port=free_port(),
        max_restarts=0,
        agent_metrics_port=0,
        rank_metrics_port=0,
        **more,
    )


def job(cell: Cell, workdir: Path, steps: int = STEPS) -> tuple[Topology, str, list[str]]:
    topology = cell_topology(pg_timeout_s=PG_TIMEOUT_S)
    paced = ["--steps", str(steps), "--step-time", str(STEP_TIME)]
    if cell.fault.workload:  # a fault the trainer has no hook for (lab.bench.grading.Fault.workload)
        debug = "DETAIL" if cell.fault.detail else topology.distributed_debug
        return topology.replace(distributed_debug=debug), script_path(cell.fault.workload), paced
    every = cell.fault.save_every
    if cell.target == "trainer":
        return topology, script_path("trainer"), [*paced, "--ckpt-every", str(every), "--check-loss"]
    watched = topology.replace(script_wrapper=("--workdir", str(workdir)))
    saves = [SCRIPT_RESUMES if cell.fault.resumes else "--save-every", str(every)] if every else []
    return watched, script_path("plain_train"), [*paced, "--timeout-s", str(PG_TIMEOUT_S), *saves]


def waiting(stop: threading.Event, seconds: float) -> None:
    if stop.wait(seconds):
        raise LabError("stopped")


def reached(events_dir: Path, rank: int, step: int, stop: threading.Event) -> tuple[int, dict]:
    """Once the rank has completed `step`: its last step, and its start record (the node and
    local rank it runs as: the rendezvous, not the node's name, orders the nodes' ranks)."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        mine = [e for e in read_events(events_dir) if e["rank"] == rank]
        steps = [e["step"] for e in mine if e["event"] == Event.STEP]
        if steps and max(steps) >= step:
            return max(steps), [e for e in mine if e["event"] == Event.START][-1]
        waiting(stop, 0.05)
    raise LabError(f"rank {rank} never reached step {step} in {START_S:.0f} s: see {events_dir.parent}")


def furthest_step(events: Iterable[dict]) -> int:
    """The furthest step any rank has completed."""
    return max((e["step"] for e in events if e["event"] == Event.STEP), default=0)


def ended(nodes, stop: threading.Event) -> bool:
    """The job ended (every node exited) within three process-group timeouts and half a minute."""
    deadline = time.monotonic() + 3 * PG_TIMEOUT_S + 30
    while time.monotonic() < deadline:
        if all(node.exit_code() is not None for node in nodes):
            return True
        waiting(stop, 0.1)
    return False


def slowed_for(events_dir: Path, at: int, stop: threading.Event) -> bool:
    """A fault the job goes on through (a straggler, a checkpoint not written): once some rank is
    named a straggler or failed a save, or SLOWED_STEPS steps after the fault (the card then names
    whom it can). False: the job has not ended."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        events = list(read_events(events_dir))
        furthest = furthest_step(events)
        failed_save = any(e["event"] in (Event.CHECKPOINT_FAILED, Event.CHECKPOINT_INVALID) for e in events)
        if stragglers.first_named(events) or failed_save or furthest > at + SLOWED_STEPS:
            break
        waiting(stop, 0.2)
    return False


def run_cell(cell: Cell, hosts: str, tmp: Path, keep: str, stop: threading.Event) -> tuple[Grade, dict]:
    """The cell's job broken once and graded; keep: a folder for the evidence the card was drawn from."""
    run_dir = RunDir(tmp / cell.name)
    dumps = None
    runtime = runtimes.create("local", run_dir, log=lambda m: None, hosts=hosts, monitoring="off")
    runtimes.begin_job(runtime, lambda m: None)
    try:
        workdir = run_dir.path / "work"
        topology, script, args = job(cell, workdir, steps=cell.step if cell.fault.resumes else STEPS)
        topology, nodes = up_on_its_own_port(runtime, topology, script, args)
        at, start = reached(run_dir.path / "events", cell.rank, cell.step, stop)
        with memory_cage(start["pid"], cell.name) if cell.fault.caged else contextlib.nullcontext():
            if cell.fault.resumes:
                resume_damaged(cell, runtime, topology, workdir, stop)
            else:
                if cell.fault.kills_store:  # a job's fault, not a rank's: the job's step when it landed
                    at = furthest_step(read_events(run_dir.path / "events"))
                inject(cell, nodes, start)
                if cell.fault.expect in flight_recorder.HANGS:
                    dumps = hang_dumps(run_dir.path / "events", tmp / f"{cell.name}-fr", stop)
            goes_on = not cell.fault.ends_job or cell.target in cell.fault.survived_by
            finished = slowed_for(run_dir.path / "events", at, stop) if goes_on else ended(nodes, stop)
        kernel = kernel_log()
        card = why.card(run_dir.path, kernel=lambda: kernel)
        if keep:
            keep_evidence(run_dir.path, Path(keep) / cell.name, {**cell_truth(cell), "step": at}, kernel, start["pid"])
    finally:
        runtime.down(grace_s=5)
        run_dir.release()
    extra = {"card": card.text(), "job_ended": finished}
    if dumps is not None:  # torch's own analyzer on the same hang, graded the same way
        verdict = flight_recorder.analyze(dumps)
        extra["flight_recorder"] = {
            **verdict.to_json(),
            **flight_recorder.graded(cell.target, cell.fault, cell.rank, at, verdict).to_json(),
        }
    return grade(cell.target, cell.fault, cell.rank, at, card), extra


def hang_dumps(events_dir: Path, into: Path, stop: threading.Event) -> Path:
    """While the job hangs: every rank asked for its dumps, the raw ones that answered copied."""
    waiting(stop, HANG_SETTLE_S)
    asked = forensics.collect(events_dir, NODES * NPROC)
    flight_recorder.copy_dumps(events_dir, asked["answered"], into)
    return into


def inject(cell: Cell, nodes, start: dict) -> None:
    """The cell's fault, on the job as it runs: a signal to the rank, or its node's own fault."""
    node = next(n for n in nodes if n.name == start["node"])
    if cell.fault.cuts_node:
        node.partition()  # its netns goes with `down`, and its rules with it
    elif cell.fault.kills_store:
        nodes[0].kill_agent()  # the lab's rendezvous store lives in node 0's agent
    else:
        node.kill_worker(start["local_rank"], cell.fault.signal)


def resume_damaged(cell: Cell, runtime, topology: Topology, workdir: Path, stop: threading.Event) -> None:
    """The job, run up to the cell's step, ends; its newest checkpoint is cut in half (as a crash
    mid-save leaves it, where saves are not atomic) and the job runs again to resume from it."""
    nodes = runtime.attach()
    if not ended(nodes, stop) or any(node.exit_code() != 0 for node in nodes):
        raise LabError(f"the job before the damage did not end well: {[n.exit_code() for n in nodes]}")
    if cell.target == "trainer":
        checkpoint_files.corrupt_newest(Path(runtime.checkpoint_dir()))
    else:
        snapshot = workdir / "snapshot.pt"
        snapshot.write_bytes(snapshot.read_bytes()[: snapshot.stat().st_size // 2])
    _, script, args = job(cell, workdir)
    runtime.rerun(topology, script, args)


def cell_truth(cell: Cell) -> dict:
    return {"target": cell.target, "fault": cell.fault.name, "rank": cell.rank}


def keep_evidence(run_dir: Path, into: Path, truth: dict, kernel: str, pid: int) -> None:
    """The folder says what was done to it, so tests grade its card again (tests/unit)."""
    kept = evidence.keep(run_dir, into)
    files.write_text(kept / TRUTH, json.dumps(truth) + "\n")
    said = [line for line in kernel.splitlines() if f"Killed process {pid} " in line]
    if said:  # the kernel's own word on the rank, which a test cannot read from its machine
        files.write_text(kept / KERNEL_LOG, "\n".join(said) + "\n")
