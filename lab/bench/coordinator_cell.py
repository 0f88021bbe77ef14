"""One cell of `lab bench coordinators`: a 2 x 2 trainer job whose coordinator is killed mid-run.

A coordinator is a process every node relies on but no rank is: the rendezvous store (in
node 0's agent for c10d and the lab's backend; the lab's etcd server for etcd-v2) and the
lab's Prometheus. When rank 0 has completed KILL_AT, the cell SIGKILLs it and watches the
nodes. The verdict:

- survived: every rank completed its steps (a node whose agent was killed may still exit non-zero:
  the outcome says so);
- failed fast: the job ended within twice its configured timeout, and `lab why` says why;
- failed unexplained: it ended in time, but `lab why` named no cause;
- hung: it had not ended twice its timeout after the kill (plus the steps it still had to
  run). The cell then stops it; the verdict's time is the deadline.

The configured timeout is the longest wait the job was given for what it lost: the rendezvous
join timeout (which bounds every store call) for a store, the process groups' timeout for a
coordinator the ranks do not use (a lost peer then fails at the latest after it).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab import files, procs, runtimes
from lab.bench import up_on_its_own_port
from lab.bench.diagnosis_cell import NPROC, TRUTH, cell_topology, reached, waiting
from lab.errors import LabError
from lab.health.events import Event, ExitReason, read_events
from lab.rundir import RunDir
from lab.topology import Topology
from lab.why import card as why
from lab.why import evidence
from lab.workloads import script_path

# 14 s still to run after the kill: longer than any incidental wait (a node's shim gives its
# orphans 5 s to finish their output), so that "survived" means the job outlived the loss.
STEP_TIME, STEPS, KILL_AT = 0.05, 300, 20
JOIN_TIMEOUT_S, PG_TIMEOUT_S = 20, 10


@dataclass(frozen=True)
class Coordinator:
    key: str
    what: str  # what is killed, for the table
    rdzv_backend: str
    timeout_s: int  # the configured timeout it is judged against
    monitoring: str = "off"
    runtimes: tuple[str, ...] = ("local",)  # where it is measured: where it exists, and the cell can kill it
    own_cluster: bool = False  # killed on a Ray cluster the cell starts for it (lab.bench.ray_head_cell)


BOTH: dict = {"runtimes": ("local", "docker")}  # a process here, or a container's (or the container)
COORDINATORS = {
    c.key: c
    for c in (
        Coordinator("c10d", "node 0's agent, host of the c10d rendezvous TCPStore", "c10d", JOIN_TIMEOUT_S, **BOTH),
        Coordinator("lab-store", "node 0's agent, host of the lab's rendezvous store", "lab", JOIN_TIMEOUT_S, **BOTH),
        Coordinator("etcd", "the lab's etcd server (the etcd-v2 rendezvous)", "etcd-v2", JOIN_TIMEOUT_S),
        Coordinator("prometheus", "the lab's Prometheus server", "lab", PG_TIMEOUT_S, monitoring="on", **BOTH),
        # lab.bench.ray_head_cell, on a Ray cluster of its own; Ray's timeout for a lost head
        Coordinator("ray-head", "the Ray head's Global Control Store", "lab", 60, runtimes=("ray",), own_cluster=True),
    )
}


@dataclass(frozen=True)
class Cell:
    coordinator: Coordinator
    runtime: str
    trial: int

    @property
    def name(self) -> str:
        return f"{self.coordinator.key}-{self.runtime}-{self.trial}"


@dataclass
class Outcome:
    cell: Cell
    verdict: str  # survived | failed fast | failed unexplained | hung
    seconds: float  # from the kill to the verdict
    said: str  # what `lab why` says of it, or how the job ended
    exit_codes: dict[str, int | None]  # node -> its exit status; None: still running, or its end unrecorded
    left: list[str] = field(default_factory=list)  # what `lab down` left of the cell's lab, where a cell looks

    @property
    def within_twice_timeout(self) -> bool:
        return self.verdict != "hung"

    def to_json(self) -> dict:
        return {
            "coordinator": self.cell.coordinator.key,
            "trial": self.cell.trial,
            "verdict": self.verdict,
            "seconds": round(self.seconds, 2),
            "runtime": self.cell.runtime,
            "timeout_s": self.cell.coordinator.timeout_s,
            "said": self.said,
            "exit_codes": self.exit_codes,
            "left": self.left,
        }


def topology(coordinator: Coordinator) -> Topology:
    """Restarts left (a lost store must not pass for a used-up budget), short timeouts."""
    return cell_topology(join_timeout_s=JOIN_TIMEOUT_S, pg_timeout_s=PG_TIMEOUT_S).replace(
        rdzv_backend=coordinator.rdzv_backend, max_restarts=2
    )


def kill(coordinator: Coordinator, runtime, nodes) -> None:
    """SIGKILL the coordinator: node 0's agent (a process, or one in its container), or the
    lab's own etcd or Prometheus (the runtime knows where its Prometheus runs)."""
    if coordinator.key in ("c10d", "lab-store"):
        nodes[0].kill_agent()
    elif coordinator.key == "prometheus":
        runtime.kill_prometheus()
    elif not procs.kill_by_command(str(runtime.run_dir.path), coordinator.key):  # the lab's etcd
        raise LabError(f"no {coordinator.key} process of this lab to kill")


def judged(cell: Cell, run_path: Path, codes: dict[str, int | None], seconds: float) -> Outcome:
    """The verdict of a job that ended (codes all known) or did not (a None among them)."""
    card = why.card(run_path, kernel=lambda: "")
    lost = card.store_loss.text() if card.store_loss else ""
    if None in codes.values():
        return Outcome(cell, "hung", seconds, lost or "no node ended", codes)
    if len(completed_ranks(run_path)) == len(codes) * NPROC:  # the training outlived the loss
        said = [lost] if lost else []
        said.append(f"every rank completed its {STEPS} steps")
        said += [f"{node} exited {code}" for node, code in codes.items() if code]
        return Outcome(cell, "survived", seconds, "; ".join(said), codes)
    first = card.text().splitlines()[0] if card.first else ""
    if lost:
        return Outcome(cell, "failed fast", seconds, lost, codes)
    return Outcome(cell, "failed unexplained", seconds, first or "the card named no cause", codes)


def run_cell(cell: Cell, hosts: str, tmp: Path, keep: str, stop: threading.Event) -> Outcome:
    """keep: a folder for the evidence the verdict was drawn from (lab.why.evidence), with its truth."""
    coordinator = cell.coordinator
    run_dir = RunDir(tmp / cell.name)
    taken = {o.name for o in runtimes.runtime_class(cell.runtime).OPTIONS}
    options = {k: v for k, v in {"hosts": hosts, "monitoring": coordinator.monitoring}.items() if k in taken}
    runtime = runtimes.create(cell.runtime, run_dir, log=lambda m: None, **options)
    runtimes.begin_job(runtime, lambda m: None)
    try:
        _topology, nodes = up_on_its_own_port(runtime, topology(coordinator), script_path("trainer"), trainer_args())
        reached(run_dir.path / "events", 0, KILL_AT, stop)
        killed = time.monotonic()
        kill(coordinator, runtime, nodes)
        deadline = killed + 2 * coordinator.timeout_s + (STEPS - KILL_AT) * STEP_TIME
        codes = {n.name: n.exit_code() for n in nodes}
        while None in codes.values() and time.monotonic() < deadline:
            waiting(stop, 0.1)
            codes = {n.name: n.exit_code() for n in nodes}
        seconds = time.monotonic() - killed
        outcome = judged(cell, run_dir.path, codes, seconds)
        if keep:
            kept = evidence.keep(run_dir.path, Path(keep) / cell.name)
            files.write_text(kept / TRUTH, json.dumps({**outcome.to_json(), "steps": STEPS}) + "\n")
        return outcome
    finally:
        runtime.down(grace_s=5)
        run_dir.release()


def trainer_args() -> list[str]:
    return ["--steps", str(STEPS), "--step-time", str(STEP_TIME), "--ckpt-every", "0"]


def completed_ranks(run_path: Path) -> set[int]:
    return {
        e["rank"]
        for e in read_events(run_path / "events")
        if e["event"] == Event.EXIT and e.get("reason") == ExitReason.COMPLETED
    }
