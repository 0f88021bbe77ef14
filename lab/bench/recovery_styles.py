"""The ways a 2 x 2 job can come back from a killed worker, each as one timed trial.

Every style trains the same model for 40 steps of at least 0.1 s; when rank 1 reaches
step 25 it is SIGKILLed. A trial returns the seconds from the kill to the first step the
recovered group completes, the steps done twice (work lost), and the stages from the
event logs. The styles:

- bare torchrun: torch.distributed.run as shipped (spawned workers, c10d rendezvous) with
  only the restart workaround, without which it never recovers (lab.node.launch);
- spawn restart: the lab's launch path with torchrun's spawned workers;
- preloaded: workers forked from a server that has torch imported, torch's c10d rendezvous
  (what `--recovery torchrun` runs);
- tuned: preloaded, plus the lab's rendezvous backend (lab.node.fast_rendezvous): the lab's
  default, `--recovery restart`;
- in-process: no restart at all; the survivors re-form the group with a warm spare and
  take state from a peer (lab.inprocess: the trainer trains in a loop of attempts, under the
  keeper per node that `--recovery in-process` starts on the runtime's hosts), what
  `lab exercise run kill-worker` runs by default;
- your script (tuned): the tuned restart of an ordinary DDP script with no lab import
  (lab/workloads/plain_train.py: rank 0 snapshots every 10 steps, every rank resumes from
  it), watched as `--script` drills watch one (lab.node.user_script): what the default
  `lab exercise run kill-worker --script` runs on a script that has not opted in to
  in-process recovery.

The torchrun styles checkpoint every 10 steps and resume from step 20. The lab's styles run on
any runtime that takes them (the local runtime's hosts, docker's containers): the kill goes
through the node's own fault (Node.kill_worker), as a drill's does, and is timed from just
before it. (start_keepers runs in-process's keepers as plain processes on loopback, for tests
that need no runtime.)
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from lab import runtimes
from lab.bench import free_port, up_on_its_own_port
from lab.exercises import inprocess_verdict, observe
from lab.health.events import Event, read_events
from lab.rundir import RunDir
from lab.topology import Topology
from lab.workloads import script_path

STEPS, STEP_TIME, KILL_AT, KILL_RANK = 40, 0.1, 25, 1
TRAINER_ARGS = ["--steps", str(STEPS), "--ckpt-every", "10", "--step-time", str(STEP_TIME)]
BASE = Topology(nodes=2, nproc_per_node=2, max_restarts=2)
LAB_STYLES = {
    "spawn restart": BASE.replace(worker_start="spawn"),
    "preloaded": BASE.replace(worker_start="preload"),
    "tuned": BASE.replace(worker_start="preload", rdzv_backend="lab"),
    "in-process": BASE.replace(in_process=True),
    "your script (tuned)": BASE.replace(worker_start="preload", rdzv_backend="lab"),
}
SCRIPT_STYLES = ("your script (tuned)",)  # these run plain_train.py, the others the trainer
SCRIPT_ARGS = ["--steps", str(STEPS), "--step-time", str(STEP_TIME), "--snapshot-every", "10", "--timeout-s", "30"]
STYLES = ("bare torchrun", *LAB_STYLES)


def kill_and_time(
    events_dir: Path,
    rank: int = KILL_RANK,
    at_step: int = KILL_AT,
    timeout_s: float = 180,
    kill: Callable[[], object] | None = None,
) -> tuple[float, dict]:
    """SIGKILL rank's worker at at_step (by kill(), else by the pid its start event names, which
    this machine can signal); (seconds to the recovered group's first step, details)."""
    deadline = time.monotonic() + timeout_s
    events: list[dict] = []
    while time.monotonic() < deadline:
        events = list(read_events(events_dir)) if events_dir.exists() else []
        if any(e["event"] == Event.STEP and e["rank"] == rank and e["step"] >= at_step for e in events):
            break
        time.sleep(0.02)
    pid = next(e["pid"] for e in reversed(events) if e["event"] == Event.START and e["rank"] == rank)
    killed = time.time()
    if kill is not None:
        kill()
    else:
        os.kill(pid, signal.SIGKILL)
    while time.monotonic() < deadline:
        events = list(read_events(events_dir))
        after = [e for e in events if e["event"] == Event.STEP and e["restart"] >= 1]
        if after:
            first = min(after, key=lambda e: e["time"])
            saves = [e["seconds"] for e in events if e["event"] == Event.CHECKPOINT_SAVED]
            details = {
                "stages": stages(events, observe.agent_events(events_dir), killed),
                "work_lost_steps": steps_done_twice(events, killed, first["step"]),
                "resumed_at": first["step"],
                "checkpoint_s": statistics.median(saves) if saves else None,  # what one save blocks a rank for
            }
            return first["time"] - killed, details
        time.sleep(0.02)
    raise RuntimeError("the job did not recover")


def stages(events: list[dict], agents: list[dict], killed: float) -> dict:
    """torchrun's restart stages (observe.recovery_breakdown), or in-process's own."""
    if agents:
        return observe.recovery_breakdown(events, agents, killed)
    return inprocess_verdict.breakdown(events, killed)


def steps_done_twice(events: list[dict], killed: float, first_after: int) -> int:
    """Steps completed before the kill that the recovered group did again."""
    reached = max((e["step"] for e in events if e["event"] == Event.STEP and e["time"] < killed), default=0)
    return max(0, reached - (first_after - 1))


def lab_trial(tmp: Path, hosts: str, style: str, runtime_name: str, world: int = 4) -> tuple[float, dict]:
    """One of the lab's styles on a runtime (hosts: the local runtime's kind, where it takes one),
    `world` ranks at BASE's ranks a node."""
    taken = {o.name for o in runtimes.runtime_class(runtime_name).OPTIONS}
    options = {k: v for k, v in {"hosts": hosts, "monitoring": "off"}.items() if k in taken}
    run_dir = RunDir(tmp / f"lab-run-{runtime_name}")
    runtime = runtimes.create(runtime_name, run_dir, log=lambda m: None, **options)
    runtimes.begin_job(runtime, lambda m: None)  # as every command that starts a job: the run dir claimed first
    try:
        # A rendezvous port of its own, and no exporters (what a trial times is in the run dir's files):
        # loopback hosts share this machine's ports with any lab beside it (a CI run's lab met its 9400).
        ports = {"rdzv_port": free_port(), "agent_metrics_port": 0, "rank_metrics_port": 0}
        topology = LAB_STYLES[style].replace(nodes=world // BASE.nproc_per_node, **ports)
        script, args = script_path("trainer"), TRAINER_ARGS
        if style in SCRIPT_STYLES:  # its snapshot in a working dir of its own, under the run dir
            watched = ("--workdir", str(runtime.script_workdir("bench")))
            topology, script, args = topology.replace(script_wrapper=watched), script_path("plain_train"), SCRIPT_ARGS
        topology, nodes = up_on_its_own_port(runtime, topology, script, args)
        node = next(n for n in nodes if n.index == KILL_RANK // topology.nproc_per_node)
        local_rank = KILL_RANK % topology.nproc_per_node
        return kill_and_time(runtime.run_dir.path / "events", kill=lambda: node.kill_worker(local_rank))
    finally:
        runtime.down(grace_s=5)
        run_dir.release()


def in_session(argv: list[str], env: dict | None = None, log: Path | None = None) -> subprocess.Popen:
    """argv in a session of its own; its output to `log` (appended), or nowhere."""
    with open(log or os.devnull, "ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop_sessions(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for proc in procs:
        proc.wait(60)


def bare_trial(tmp: Path) -> tuple[float, dict]:
    events, port = tmp / f"bare-events-{time.time()}", free_port()
    # TMPDIR: a killed worker's pytorch-errorfile-*.pickle stays in the bench's own temp dir.
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "TMPDIR": str(tmp)}
    agents = [
        in_session(
            [
                *(sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2"),
                *("--max-restarts=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}"),
                *(f"--rdzv-conf=is_host={int(i == 0)}", f"--log-dir={tmp}/bare-logs-{i}-{port}"),
                *(script_path("trainer"), *TRAINER_ARGS, "--ckpt-dir", f"{events}-ckpt", "--events-dir", str(events)),
            ],
            env,
        )
        for i in range(2)
    ]
    try:
        return kill_and_time(events)
    finally:
        stop_sessions(agents)


def start_keepers(
    events: Path,
    steps: int = STEPS,
    step_time: float = STEP_TIME,
    keeper_flags: tuple[str, ...] = (),
    tmpdir: Path | None = None,
) -> list[subprocess.Popen]:
    """An in-process-recovery job of 2 x 2 on loopback: one keeper per node, each in its own session,
    its ranks on one OpenMP thread each, as lab.node.launch starts a keeper of several ranks; with
    tmpdir, their TMPDIR, as a lab's node has its own (a SIGKILLed keeper's fork server leaves its
    socket's folder there)."""
    port = free_port()
    env = {**one_thread_each(), **({"TMPDIR": str(tmpdir)} if tmpdir else {})}
    return [
        in_session(
            [
                *(sys.executable, "-m", "lab.node.inprocess.keeper", f"--store=127.0.0.1:{port}", f"--node-rank={i}"),
                *("--nodes=2", "--nproc-per-node=2", f"--events-dir={events}", *keeper_flags),
                *("--", script_path("inprocess_train"), f"--steps={steps}", f"--step-time={step_time}"),
            ],
            env=env,
        )
        for i in range(2)
    ]


def one_thread_each() -> dict[str, str]:
    """This environment, with OMP_NUM_THREADS=1 unless it is set: what lab.node.launch gives a keeper
    of several ranks (lab.node.preload.before_torch), whose ranks otherwise spin a thread per core."""
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def trial(style: str, tmp: Path, hosts: str, runtime_name: str, world: int = 4) -> tuple[float, dict]:
    """One timed recovery; bare torchrun runs as plain processes here, whatever the runtime, at 2 x 2."""
    if style == "bare torchrun":
        return bare_trial(tmp)
    return lab_trial(tmp, hosts, style, runtime_name, world)
