"""The exercise engine: Ray drives the drill, one node-agent actor per lab node.

The driver brings the lab up, creates a `NodeAgent` actor per node (it owns that node
through the runtime's Node handle and injects faults there), runs the exercise's
timeline through a Drill (lab.exercises.drill), and always tears everything down: Ray, every
process, every namespace, also on failure or Ctrl-C."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from types import ModuleType
from typing import TextIO

from lab import exercises, runtimes
from lab.errors import LabError
from lab.exercises import DrillOptions, grid
from lab.exercises.drill import Drill
from lab.exercises.node_agent import NodeAgent
from lab.exercises.ray_logs import ray_notices_to
from lab.recovery import Recovery
from lab.report import Report
from lab.rundir import MARKER
from lab.runtimes.base import Runtime
from lab.runtimes.monitored import MonitoredRuntime
from lab.runtimes.ray_calls import check_reachable, connect
from lab.runtimes.tempdirs import ray_session_prefix
from lab.topology import Topology
from lab.workloads import script_path


def start_ray(ray_address: str | None, ray_tmp: str) -> None:
    """Join the cluster at ray_address, or start a fresh local instance of the drill's own,
    node address 127.0.0.1 (its gRPC servers still listen on every interface: see the README)."""
    import ray

    if ray_address:
        connect(ray_address)
        return
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        # Ray makes what it puts there world-writable (0777, no sticky bit); inside
        # ray_tmp (0700, which Ray never touches) no other user can reach it.
        _temp_dir=os.path.join(ray_tmp, "r"),
        _node_ip_address="127.0.0.1",
    )


def refuse_early(
    exercise: ModuleType, options: DrillOptions, runtime: Runtime, ray_address: str | None
) -> tuple[Topology, Recovery]:
    """What can be refused before anything starts, in one line: nothing is made on bad input.
    The grid's cell (lab.exercises.grid), then the flags (--recovery among them), then whether
    the runtime can run here now. Returns the drill's job and how it recovers."""
    drill = getattr(exercise, "fault", exercise)  # a run on a user's script names its fault (None: the reference)
    target = "script" if hasattr(exercise, "SCRIPT") else "trainer"
    why = grid.refusal(drill, type(runtime), target, options) if drill is not None else ""
    if why:
        raise LabError(why)
    watched = isinstance(runtime, MonitoredRuntime) and runtime.monitoring != "off"
    if getattr(exercise, "NEEDS_PROMETHEUS", False) and not watched:
        raise LabError(f"{exercise.NAME} reads its verdict from Prometheus: drop --prometheus off")
    job = exercises.job(exercise, options, runtime.job_rendezvous())
    runtime.check()  # before Ray starts: a runtime that cannot run here says so first
    if ray_address:
        check_reachable(ray_address)  # a cluster nobody answers for is bad input
    return job


def bring_up(exercise: ModuleType, options: DrillOptions, runtime: Runtime, topology: Topology, out: TextIO) -> Drill:
    """Start the job (a user's script, lab.exercises.script, or one of the lab's workloads) and
    one NodeAgent actor per node; Ray is up already."""
    import ray

    workload = getattr(exercise, "SCRIPT", None) or script_path(getattr(exercise, "WORKLOAD", "trainer"))
    topology, nodes = runtime.up(topology, workload, exercise.trainer_args(options))
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # On this machine, which has the run dir (a Ray machine may have a disk of its own): a fault
    # still lands on its node's machine, through the runtime's handle.
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    actor = ray.remote(num_cpus=0)(NodeAgent).options(scheduling_strategy=here)
    where = str(runtime.run_dir.path)
    agents = {n.name: actor.remote(where, n.name) for n in sorted(nodes, key=lambda n: n.index)}
    drill = Drill(
        runtime=runtime,
        topology=topology,
        agents=agents,
        events_dir=runtime.run_dir.path / "events",
        ckpt_dir=runtime.checkpoint_dir(),
        ray=ray,
        out=out,
        workload=workload,
    )
    drill.progress(f"{exercise.NAME}: {len(nodes)} nodes x {topology.nproc_per_node} workers up")
    return drill


def run_drill(
    exercise: ModuleType,
    options: DrillOptions,
    runtime: Runtime,
    ray_address: str | None = None,
    on_report: Callable[[Report, Drill], None] | None = None,
    out: TextIO = sys.stdout,
    verbose: bool = False,
) -> Report:
    """Bring the lab up on runtime, run exercise.run(drill, options), hand the report to
    on_report(report, drill) while the events still exist, then tear everything down. Ray
    drives the drill: the cluster at ray_address, else a local instance of the drill's own;
    Ray's own notices go to the run dir's logs (and to stderr as well when verbose)."""
    import ray

    topology, how = refuse_early(exercise, options, runtime, ray_address)
    run_dir = runtime.run_dir
    runtimes.begin_job(runtime, runtime.log)  # this run dir's lab; other labs are left alone
    lab_id = run_dir.lab_id
    # Ray's own processes inherit the lab's mark, so `lab down` finds them after a crash too.
    os.environ[MARKER] = str(run_dir.path)
    drill = None
    # Ray's session files go to a temp dir named by the lab id (short: it holds Unix sockets),
    # removed below and by `lab down` after a crash.
    ray_tmp = tempfile.mkdtemp(prefix=ray_session_prefix(lab_id))
    # ray.init replaces SIGTERM's handler with one that exits at once; the lab's own (tear down
    # like Ctrl-C, and a second signal changes nothing) is put back after it, SIGINT's too.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        with ray_notices_to(run_dir.path / "logs" / "ray-driver.log", verbose):
            start_ray(ray_address, ray_tmp)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        drill = bring_up(exercise, options, runtime, topology, out)
        drill.progress(how.line())
        report = exercise.run(drill, options)
        report.facts["recovery_style"] = {"style": how.style, "why": how.why}
        if on_report:
            on_report(report, drill)
        return report
    finally:
        if ray.is_initialized():
            ray.shutdown()
        os.environ.pop(MARKER, None)
        if drill is not None:
            drill.progress("tearing down")
        runtime.down(grace_s=5.0)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        run_dir.release()
