"""A lab node as the pods of one index of the Indexed Job, and the faults it suffers through the API.

Every call is a kubectl command built by lab.runtimes.kubectl. The pod of a node is the
newest one the Job made for its index, so a node survives its pod's replacement. Faults
act as a cluster's own disruptions do, and never from inside a pod with privileges:

- a worker: `kubectl exec` into the node container signals it (SIGKILL, SIGSTOP/SIGCONT);
- the node: an API-initiated eviction (grace 0: a lost machine; a grace period: a
  preemption). The pod gets the DisruptionTarget condition, which the Job's
  podFailurePolicy ignores, and the Job makes a new pod for the index, with empty
  emptyDirs: its checkpoints come back from a peer (lab.workloads.trainer_state);
- a partition: the label torchrun-lab/partitioned=true, which the NetworkPolicies of
  k8s/base turn into "no traffic in or out"; heal removes it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from lab.errors import LabError
from lab.runtimes.base import Node
from lab.runtimes.faults import FaultUnsupported
from lab.runtimes.kubectl import JOB, Kubectl

WORKERS_FILE = "/tmp/lab-workers.json"  # LAB_WORKERS_FILE in k8s/base/job.yaml
REPLACEMENT_TIMEOUT_S = 120


class PodNode(Node):
    """Index `index` of the Job; its processes live on a cluster node, not here (no pid)."""

    runtime_name = "k8s"
    _evicted: str | None = None  # the pod the last eviction hit

    def __init__(self, kubectl: Kubectl, index: int, run_dir: Path):
        self.kubectl, self.index = kubectl, index
        self.name = f"{JOB}-{index}"
        self.address = f"{JOB}-{index}.{JOB}"
        self.dir = run_dir / "nodes" / self.name

    def _pods(self) -> list[tuple[str, str]]:
        """(name, phase) of the index's pods, oldest first."""
        lines = self.kubectl.run(self.kubectl.index_pods(self.index)).split("\n")
        return [(f[0], f[1] if len(f) > 1 else "Pending") for f in (line.split() for line in lines) if f]

    def pod(self) -> str:
        pods = self._pods()
        if not pods:
            raise FaultUnsupported(f"no pod for node {self.index} (yet)")
        return pods[-1][0]

    def start(self, argv: list[str]) -> None:
        raise LabError("pods are started by their Job: apply the manifests (lab up --runtime k8s)")

    def stop(self, grace_s: float = 10.0) -> None:
        self._evict(int(grace_s))

    def exit_code(self) -> int | None:
        state = self.kubectl.run(self.kubectl.pod_state(self.pod())).split()
        if state[:1] == ["Succeeded"]:
            return 0
        if state[:1] == ["Failed"]:
            return int(state[1]) if len(state) > 1 else 1
        return None

    # Faults -----------------------------------------------------------------------------

    def _in_pod(self, code: str) -> str:
        try:
            return self.kubectl.run(self.kubectl.exec(self.pod(), "python", "-c", code)).strip()
        except LabError as e:
            raise FaultUnsupported(f"{self.name}: {e}") from None

    def worker_pids(self) -> dict[int, int]:
        code = (
            "import json; from lab.node import worker_record; "
            f"r = worker_record.read({WORKERS_FILE!r}); print(json.dumps(r[1] if r else {{}}))"
        )
        return {int(rank): pid for rank, pid in json.loads(self._in_pod(code) or "{}").items()}

    def kill_worker(self, local_rank: int, sig: int = signal.SIGKILL) -> int:
        pid = self.worker_pids().get(local_rank)
        if pid is None:
            raise FaultUnsupported(f"{self.name} has no worker with local rank {local_rank}")
        self._in_pod(f"import os; os.kill({pid}, {int(sig)})")
        return pid

    def kill_agent(self) -> int:
        code = f"from lab.node import worker_record; print(worker_record.agent_pid({WORKERS_FILE!r}) or '')"
        pid = self._in_pod(code)
        if not pid.isdigit():
            raise FaultUnsupported(f"{self.name} has no agent that has started workers")
        self._in_pod(f"import os; os.kill({pid}, 9)")
        return int(pid)

    def _evict(self, grace_s: int) -> str:
        pod = self.pod()
        self.kubectl.run(self.kubectl.evict(pod), stdin=self.kubectl.eviction_body(pod, grace_s))
        self._evicted = pod
        return pod

    def kill_node(self) -> None:
        """Evict the pod at once (grace 0), as a machine that is lost; the Job replaces it."""
        self._evict(0)

    def preempt(self, grace_s: float) -> None:
        """Evict the pod with a grace period: SIGTERM now, SIGKILL after grace_s, as a preemption."""
        self._evict(max(1, round(grace_s)))

    def restart(self) -> None:
        """The Job controller brings the node back with a new pod; wait until it exists."""
        deadline = time.monotonic() + REPLACEMENT_TIMEOUT_S
        while time.monotonic() < deadline:
            pods = self._pods()
            if pods and pods[-1][0] != self._evicted and pods[-1][1] not in ("Failed", "Succeeded"):
                return
            time.sleep(1.0)
        raise FaultUnsupported(f"the Job made no new pod for {self.name} within {REPLACEMENT_TIMEOUT_S} s")

    def partition(self) -> None:
        self.kubectl.run(self.kubectl.label_partitioned(self.pod(), True))

    def heal(self) -> None:
        self.kubectl.run(self.kubectl.label_partitioned(self.pod(), False))

    def corrupt_checkpoint(self, directory: str, mode: str = "truncate", saved: tuple = ()) -> str:
        identities = [[int(dev), int(ino)] for dev, ino in saved]  # numbers only, into the code below
        code = (
            "from pathlib import Path; from lab.workloads import checkpoint_files; "  # no torch (its docstring)
            f"print(checkpoint_files.corrupt_newest(Path({directory!r}), {mode!r}, {identities!r}))"
        )
        return self._in_pod(code)


def follow_logs(kubectl: Kubectl, node: PodNode, events_dir: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start the node's log follower (lab.runtimes.k8s_logs) in a session of its own."""
    import sys

    node.dir.mkdir(parents=True, exist_ok=True)
    context = [f"--context={kubectl.context}"] if kubectl.context else []
    argv = [sys.executable, "-m", "lab.runtimes.k8s_logs", *context, f"--namespace={kubectl.namespace}",
            f"--index={node.index}", f"--log={node.log_path}", f"--events={events_dir}"]  # fmt: skip
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True, env=env)
