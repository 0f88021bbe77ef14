"""The coordinators bench's Ray cell: the head of a real two-machine Ray cluster killed mid-run.

The ray runtime's nodes are `python -m lab.node.launch` processes that each machine's
MachineAgent actor started (lab.runtimes.ray_node). Once they run, torchrun needs Ray for
nothing: the rendezvous store lives in node 0's agent. The cell starts a 2 x 2 trainer job
with `lab up --runtime ray --detach` on the cluster's head machine, SIGKILLs the head's Global
Control Store when rank 0 has completed the step, and waits for the lab's processes to end.

The timeout it is judged against is Ray's own for a lost head, gcs_rpc_server_reconnect_timeout_s
(60 s): after it every raylet exits, and takes its actors with it. Measured: the head's raylet
exits 1 s after the kill and its actor with it; the node's shim, orphaned, goes to the machine's
init, and the nodes the actors started train on to the end; once with 1,580 steps still to run,
85 s after the kill, past the 60 s, every rank completed. On a machine that stops what is left
when Ray exits (a container whose main process is `ray start --block`) the job goes with it.
What the lab cannot do with the head gone is reach the cluster: `lab status` says so in one
line and reads how far the ranks got from the run dir, and `lab down` stops what runs on its own
machine.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from lab import procs
from lab.bench.coordinator_cell import KILL_AT, NPROC, STEP_TIME, STEPS, Cell, Outcome, completed_ranks, trainer_args
from lab.bench.diagnosis_cell import NODES, reached, waiting
from lab.bench.ray_cluster import RayCluster, ray_cluster
from lab.errors import LabError
from lab.node.nodeproc import recorded_exits
from lab.ownership import new_lab_id
from lab.rundir import RunDir
from lab.runtimes.tempdirs import temp_dir
from lab.why import card as why


def run_cell(cell: Cell, tmp: Path, stop: threading.Event) -> Outcome:
    """The cell on a cluster of its own: it kills the head."""
    with ray_cluster(new_lab_id()) as cluster:
        return on_cluster(cell, cluster, tmp, stop)


def on_cluster(cell: Cell, cluster: RayCluster, tmp: Path, stop: threading.Event) -> Outcome:
    run_path = tmp / cell.name
    up = cluster.on_head(
        "up", "--runtime", "ray", "--ray-address", cluster.address, "--prometheus", "off", "--detach",
        "--workload", "trainer", "--", *trainer_args(), run_dir=run_path,
    )  # fmt: skip
    mark = RunDir(run_path).mark()
    try:
        if up.returncode != 0 or mark is None:
            raise LabError(f"lab up on the Ray cluster failed: {(up.stderr.strip().splitlines() or ['?'])[-1]}")
        reached(run_path / "events", 0, KILL_AT, stop)
        killed = time.monotonic()
        cluster.kill_head()
        deadline = killed + 2 * cell.coordinator.timeout_s + (STEPS - KILL_AT) * STEP_TIME
        while procs.marked_pids(str(run_path)) and time.monotonic() < deadline:
            waiting(stop, 0.2)
        seconds = time.monotonic() - killed
        running = procs.marked_pids(str(run_path))
        status = cluster.on_head("status", run_dir=run_path, timeout=120)
        outcome = judged(cell, run_path, seconds, running, status.stdout + status.stderr)
    finally:
        cluster.on_head("down", run_dir=run_path, timeout=120)
    # Every machine of this cluster shares this one's temp dir: what `lab down` left, with the head gone.
    outcome.left = [str(d) for d in [temp_dir(mark.lab_id)] if d.exists()]
    outcome.left += [f"process {pid}" for pid in procs.marked_pids(str(run_path))]
    return outcome


def judged(cell: Cell, run_path: Path, seconds: float, running: list[int], status: str) -> Outcome:
    asked = [line.strip() for line in status.splitlines() if "cannot be asked" in line]
    told = f"`lab status`: {asked[0] if asked else 'the nodes answered'}"
    completed = len(completed_ranks(run_path)) == NODES * NPROC
    codes = recorded_exits(run_path / "nodes")  # None: a shim killed with its actor recorded no end
    if running:
        return Outcome(cell, "hung", seconds, f"{len(running)} of the lab's processes still ran; {told}", codes)
    if completed:
        return Outcome(cell, "survived", seconds, f"every rank completed its {STEPS} steps; {told}", codes)
    card = why.card(run_path, kernel=lambda: "")
    first = card.text().splitlines()[0]
    verdict = "failed fast" if card.first or card.store_loss else "failed unexplained"
    return Outcome(cell, verdict, seconds, f"{first}; {told}", codes)
