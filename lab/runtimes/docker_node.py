"""A lab node as a Docker container, and the faults it can suffer.

The container runs the nodeproc shim around `python -m lab.node.launch`, under docker-init.
Its node directory, in the run directory that is mounted at the same path inside, holds
its log, its exit status and its workers' pids (as the container sees them), so the
host reads them as it does a local node's. Faults act through the daemon: a worker is
signalled with `docker exec`, a node is killed and restarted as a container, a partition
disconnects it from the lab's network and heal connects it again, with its address and
name.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab import files
from lab.errors import LabError
from lab.node import worker_record
from lab.runtimes.base import Node, NodeFiles
from lab.runtimes.docker_engine import HARDENED, LABEL, NO_IPV6
from lab.runtimes.faults import FaultUnsupported

# SIGTERM on `docker stop`: the shim hands it to torchrun, which stops its workers.
STOP_SIGNAL = "SIGTERM"


@dataclass
class DockerNode(NodeFiles, Node):
    runtime_name = "docker"
    name: str  # node<i>: the container's hostname and its name on the lab's network
    index: int
    address: str
    dir: Path
    run_dir: str
    lab_id: str
    network: str
    image: str
    user: str
    mounts: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    extra_hosts: dict = field(default_factory=dict)  # name -> address, ahead of Docker's own lines (a planted mistake)
    gpu_ids: list = field(default_factory=list)  # this node's GPUs on the host (needs the NVIDIA container toolkit)
    docker: Any = None  # a docker client

    @property
    def container_name(self) -> str:
        return f"tlab-{self.lab_id}-{self.name}"

    def container(self):
        from docker.errors import NotFound

        try:
            return self.docker.containers.get(self.container_name)
        except NotFound:
            return None

    @property
    def pid(self) -> int | None:
        """The container's first process as the host sees it (None when it is not running)."""
        found = self.container()
        return (found.attrs["State"]["Pid"] or None) if found else None

    def start(self, argv: list[str]) -> None:
        """A fresh container running argv; one left from an earlier run of this node is removed."""
        old = self.container()
        if old is not None and old.labels.get(LABEL) != self.run_dir:
            raise LabError(
                f"a container named {self.container_name} exists and is not this lab's "
                f"(label {LABEL}={old.labels.get(LABEL)}); `lab down --run-dir` its lab, or remove it"
            )
        if old is not None:
            old.remove(force=True)
        self.exit_file.unlink(missing_ok=True)
        self.workers_file.unlink(missing_ok=True)
        shim = [
            "python",
            "-m",
            "lab.node.nodeproc",
            f"--exit-file={self.exit_file}",
            f"--log-file={self.log_path}",
            "--",
        ]
        created = self.docker.containers.create(
            self.image,
            [*shim, *argv],
            name=self.container_name,
            hostname=self.name,
            user=self.user,
            labels={LABEL: self.run_dir},
            volumes=self.mounts,
            environment={"HOME": "/tmp", **self.environment},
            extra_hosts=self.extra_hosts or None,
            init=True,
            stop_signal=STOP_SIGNAL,
            working_dir="/tmp",
            detach=True,
            device_requests=self.device_requests(),
            **HARDENED,
            sysctls=NO_IPV6,
            tmpfs={"/tmp": "exec"},
            network=self.network,
            networking_config={
                self.network: self.docker.api.create_endpoint_config(ipv4_address=self.address, aliases=[self.name])
            },
        )
        created.start()

    def device_requests(self) -> list | None:
        if not self.gpu_ids:
            return None
        from docker.types import DeviceRequest

        # Its own GPUs only: containers on one host must not share a local rank's device.
        return [DeviceRequest(device_ids=[str(i) for i in self.gpu_ids], capabilities=[["gpu"]])]

    def exit_code(self) -> int | None:
        found = self.container()
        if found is None:
            return 128 + signal.SIGKILL  # removed under us: as good as killed
        state = found.attrs["State"]
        if state["Status"] in ("running", "paused", "restarting", "created"):
            return None
        return int(state["ExitCode"])

    def stop(self, grace_s: float = 10.0) -> None:
        found = self.container()
        if found is not None and found.status in ("running", "paused"):
            if found.status == "paused":
                found.unpause()
            found.stop(timeout=int(grace_s))

    # Faults -----------------------------------------------------------------------------

    def worker_pids(self) -> dict[int, int]:
        """{local_rank: pid} as the container sees them (pids in its own pid namespace)."""
        recorded = worker_record.read(self.workers_file)
        return recorded[1] if recorded else {}

    def _running(self):
        found = self.container()
        if found is None or found.status != "running":
            raise FaultUnsupported(f"{self.name}'s container is not running")
        return found

    def _signal(self, pid: int, sig: int, what: str) -> int:
        """Signal a process of the container (a pid in its own pid namespace) from inside it."""
        result = self._running().exec_run(["python", "-c", f"import os; os.kill({pid}, {int(sig)})"], user=self.user)
        if result.exit_code != 0:
            last = result.output.decode(errors="replace").strip().splitlines()[-1:]
            raise FaultUnsupported(f"cannot signal {what} on {self.name}: {' '.join(last)}")
        return pid

    def kill_worker(self, local_rank: int, sig: int = signal.SIGKILL) -> int:
        workers = self.worker_pids()
        if local_rank not in workers:
            raise FaultUnsupported(f"{self.name} has no worker with local rank {local_rank} (has: {sorted(workers)})")
        return self._signal(workers[local_rank], sig, f"worker {local_rank}")

    def kill_agent(self) -> int:
        pid = worker_record.agent_pid(self.workers_file)
        if pid is None:
            raise FaultUnsupported(f"{self.name} has no agent that has started workers")
        return self._signal(pid, signal.SIGKILL, "its agent")

    def slow_worker(self, local_rank: int, stopped_fraction: float = 0.75, period_s: float = 0.2) -> int:
        """SIGSTOP/SIGCONT on a duty cycle, from a process exec'd into the container; it ends when
        unslow_worker leaves a file in the node's directory, or when the worker is gone."""
        pid = self.worker_pids().get(local_rank)
        if pid is None:
            raise FaultUnsupported(f"{self.name} has no worker with local rank {local_rank}")
        stop_file = self.dir / "unslow"
        stop_file.unlink(missing_ok=True)
        self._running().exec_run(
            ["python", "-m", "lab.node.duty_cycle", str(pid), str(stopped_fraction), str(period_s), str(stop_file)],
            user=self.user,
            detach=True,
        )
        return pid

    def unslow_worker(self) -> None:
        files.write_beneath(self.dir, "unslow", "")  # the container can write there: no link is followed

    def kill_node(self) -> None:
        self._running().kill(signal="SIGKILL")

    def restart(self) -> None:
        """The same container, the same command, started again: a rebooted machine."""
        found = self.container()
        if found is None:
            raise FaultUnsupported(f"{self.name}'s container is gone; nothing to restart")
        if found.status == "running":
            raise FaultUnsupported(f"{self.name} is still running; kill it before restarting it")
        self.exit_file.unlink(missing_ok=True)
        found.start()

    def preempt(self, grace_s: float) -> None:
        """`docker stop`: SIGTERM, and SIGKILL after grace_s, as a preempted VM (waits for it)."""
        self._running().stop(timeout=max(1, round(grace_s)))

    def partition(self) -> None:
        self.docker.networks.get(self.network).disconnect(self._running(), force=True)

    def heal(self) -> None:
        self.docker.networks.get(self.network).connect(self._running(), ipv4_address=self.address, aliases=[self.name])

    def record(self) -> dict:
        return {"name": self.name, "index": self.index, "address": self.address, "gpus": self.gpu_ids}


def stop_all(nodes: list[DockerNode], grace_s: float) -> None:
    """Stop the nodes' containers side by side (each may take grace_s)."""
    threads = [threading.Thread(target=n.stop, args=(grace_s,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
