"""`lab doctor`'s run: the lab's hosts brought up as `lab up` brings them, a probe on each node in
place of the job (lab.node.doctor_probe), their reports judged (lab.doctor.findings), and every
host torn down again, whatever happened."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lab import files, runtimes
from lab.doctor.findings import Finding, findings
from lab.errors import LabError
from lab.runtimes.base import Log, Runtime
from lab.runtimes.plan import LaunchPlan
from lab.runtimes.ports import PortInUse, free_port
from lab.topology import Topology
from lab.workloads import script_path

PROBE_WAIT_S = 20.0  # how long a probe waits for the others' reports (--wait-s): a busy machine starts them apart
BOUND_S = 3 * PROBE_WAIT_S + 15.0  # every probe has ended by then, or it is stopped


@dataclass
class Exam:
    """What the doctor found, and what it read to find it."""

    nodes: list[str]
    facts: dict[str, dict] = field(default_factory=dict)
    reach: dict[str, dict] = field(default_factory=dict)
    found: list[Finding] = field(default_factory=list)
    seconds: float = 0.0


def examine(
    runtime: Runtime,
    topology: Topology,
    log: Log = print,
    seed: Callable[[Runtime, LaunchPlan], None] | None = None,
) -> Exam:
    """Bring the hosts up, probe every node, judge, tear down. seed(runtime, plan), when given,
    runs once the hosts are up and before the probes: the tests' way to plant a misconfiguration."""
    started = time.monotonic()
    with hosts_up(runtime, topology, log, seed) as (plan, refused):
        exam = _probe(runtime, plan, log)
    in_containers = runtime.NODES_ARE == "containers"
    exam.found = refused + findings(exam.nodes, exam.facts, exam.reach, topology.backend, in_containers)
    exam.seconds = time.monotonic() - started
    return exam


@contextmanager
def hosts_up(
    runtime: Runtime,
    topology: Topology,
    log: Log = print,
    seed: Callable[[Runtime, LaunchPlan], None] | None = None,
) -> Iterator[tuple[LaunchPlan, list[Finding]]]:
    """A job's hosts, up with nothing started on them (seeded, if asked), and what refusing them
    found; torn down on the way out, whatever happened (`lab bench doctor` starts its job there)."""
    runtimes.begin_job(runtime, log)
    try:
        plan, refused = _bring_up(runtime, topology)
        if seed:
            seed(runtime, plan)
        yield plan, refused
    finally:
        runtime.down(grace_s=2.0)
        runtime.run_dir.release()


def _bring_up(runtime: Runtime, topology: Topology) -> tuple[LaunchPlan, list[Finding]]:
    """A job's hosts, up (no job runs). A rendezvous port something on this machine holds
    (loopback hosts share it) is a finding, and the rest is probed on a free one."""
    script = script_path("ddp_train")
    try:
        plan = runtime.hosts_up(topology, script, [])
        if runtime.apart():
            raise LabError(
                f"lab doctor's probes meet in the run dir, and {', '.join(runtime.apart())} does not share "
                f"{runtime.run_dir.path} with this machine (a disk of its own): mount one disk there on every "
                f"machine (docs/ray.md), or run the job and read `lab why`"
            )
        return plan, []
    except PortInUse as e:
        if e.option != "--rdzv-port":
            raise
        instead = free_port()
        taken = Finding(
            "",
            f"the rendezvous port {e.port} is already in use on this machine",
            f"pick another with --rdzv-port (the other checks ran on port {instead})",
        )
        return runtime.hosts_up(topology.replace(rdzv_port=instead), script, []), [taken]


def _probe(runtime: Runtime, plan: LaunchPlan, log: Log) -> Exam:
    directory = runtime.run_dir.path / "work" / "doctor"  # the probes make it (as a container's user, say)
    topology = plan.topology
    for node in plan.nodes:
        python = runtime.node_argv(topology, node, plan.script, [])[0]
        env = {**topology.env(node.index), **runtime.node_env(node)}  # the job's, as lab.node.launch sets it
        node.start(
            [
                python, "-m", "lab.node.doctor_probe", f"--dir={directory}", f"--node={node.name}",
                f"--index={node.index}", f"--nodes={topology.nodes}", f"--rdzv-host={topology.rdzv_host}",
                f"--rdzv-port={topology.rdzv_port}", f"--wait-s={PROBE_WAIT_S}",
                *(f"--env={name}={value}" for name, value in sorted(env.items())),
            ]
        )  # fmt: skip
    log(f"probing {len(plan.nodes)} node(s) ({runtime.name}, {plan.hosts})")
    deadline = time.monotonic() + BOUND_S
    while any(node.exit_code() is None for node in plan.nodes) and time.monotonic() < deadline:
        time.sleep(0.1)
    exam = Exam([node.name for node in plan.nodes])
    exam.facts = _read(directory, ".json", exam.nodes)
    exam.reach = _read(directory, ".reach", exam.nodes)
    return exam


def _read(directory: Path, suffix: str, nodes: list[str]) -> dict[str, dict]:
    found = {}
    for node in nodes:
        text = files.read_text(directory / f"{node}{suffix}", 1 << 20)  # the node wrote it: no link followed
        if text:
            try:
                found[node] = json.loads(text)
            except json.JSONDecodeError as e:
                raise LabError(f"{node}'s probe wrote a report that is not JSON: {e}") from None
    return found
