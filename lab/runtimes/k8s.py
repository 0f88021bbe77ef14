"""The Kubernetes runtime: `lab up --runtime k8s [--context C] [--namespace NS] [--overlay O]`.

It renders an overlay of k8s/ with `kubectl kustomize`, writes the job's Topology into
the rendered ConfigMap (and the node count into the Job), applies it with kubectl, streams
every pod's log into the run directory and waits like any runtime. `lab down` deletes
exactly the objects it applied. Faults act through the API: deleting a pod is losing a
node; `kubectl exec` kills a worker. Nothing here talks to a cluster until `up`, so
`--dry-run` prints the manifests offline.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import yaml

from lab import procs
from lab.errors import LabError
from lab.options import Option
from lab.rundir import MARKER, RunDir
from lab.runtimes.base import Log, Node, Runtime
from lab.topology import Topology

K8S_DIR = Path(__file__).resolve().parents[2] / "k8s"
OVERLAYS = ("cpu-gloo", "cuda-nccl", "elastic", "monitoring", "chaos")
JOB = "torchrun-lab"
WORKERS_FILE = "/tmp/lab-workers.json"  # LAB_WORKERS_FILE in k8s/base/job.yaml
CONTEXT = Option("--context", "the kubectl context (default: the current one)")
NAMESPACE = Option("--namespace", "the namespace (default %(default)s)", "default")
OVERLAY = Option("--overlay", "which k8s/overlays/ to apply (default %(default)s)", "cpu-gloo", choices=OVERLAYS)


def kubectl_exe() -> str:
    exe = shutil.which("kubectl")
    if exe is None:
        raise LabError(
            "kubectl is not installed (https://kubernetes.io/docs/tasks/tools/): "
            "the k8s runtime renders and applies the manifests with it"
        )
    return exe


class Kubectl:
    def __init__(self, context: str | None, namespace: str):
        self.context, self.namespace = context, namespace

    def argv(self, *args: str) -> list[str]:
        exe = kubectl_exe()
        context = [f"--context={self.context}"] if self.context else []
        return [exe, *context, f"--namespace={self.namespace}", *args]

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
        done = subprocess.run(self.argv(*args), input=stdin, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            raise LabError(f"kubectl {args[0]} failed: {first}")
        return done.stdout

    def check_cluster(self) -> None:
        done = subprocess.run(
            self.argv("version", "--request-timeout=5s", "-o", "json"), capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0 or '"serverVersion"' not in done.stdout:
            first = (done.stderr.strip().splitlines() or ["no answer"])[0]
            where = f"context {self.context!r}" if self.context else "the current kubectl context"
            raise LabError(f"no reachable Kubernetes cluster in {where}: {first}")


def render(overlay: str, topology: Topology, script: str, script_args: list[str]) -> list[dict]:
    """The overlay's objects, with this job's topology, node count and workload in them."""
    if overlay not in OVERLAYS:
        raise LabError(f"unknown overlay {overlay!r}; choose one of: {', '.join(OVERLAYS)}")
    done = subprocess.run(
        [kubectl_exe(), "kustomize", str(K8S_DIR / "overlays" / overlay)], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise LabError(f"kubectl kustomize failed: {done.stderr.strip().splitlines()[0]}")
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "torchrun-lab-topology":
            rendered = json.loads(obj["data"]["LAB_TOPOLOGY"])
            fields = {**rendered, **pod_fields(topology, rendered)}
            obj["data"].update(
                LAB_TOPOLOGY=json.dumps(fields), LAB_WORKLOAD=script, LAB_WORKLOAD_ARGS=" ".join(script_args)
            )
        if obj["kind"] == "Job":
            obj["spec"]["completions"] = obj["spec"]["parallelism"] = topology.nodes
    return objects


def pod_fields(topology: Topology, rendered: dict) -> dict:
    """The user's topology choices, keeping what the overlay decides (endpoint, backend, ports)."""
    keep = {"rdzv_host", "rdzv_port", "rdzv_backend", "metrics_ports", "backend"}
    chosen = {k: v for k, v in topology.__dict__.items() if k not in keep}
    if rendered.get("nproc_per_node") == "gpu":
        chosen.pop("nproc_per_node")
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in chosen.items()}


class PodNode(Node):
    """A pod of the Job; its processes live on a cluster node, not here (no pid)."""

    runtime_name = "k8s"

    def __init__(self, kubectl: Kubectl, index: int, run_dir: Path):
        self.kubectl, self.index = kubectl, index
        self.name = f"{JOB}-{index}"
        self.address = f"{JOB}-{index}.{JOB}"
        self.dir = run_dir / "nodes" / self.name

    def pod(self) -> str:
        out = self.kubectl(
            "get",
            "pods",
            "-l",
            f"job-name={JOB},batch.kubernetes.io/job-completion-index={self.index}",
            "-o",
            "jsonpath={.items[-1:].metadata.name}",
        )
        if not out.strip():
            raise LabError(f"no pod for node {self.index} (yet)")
        return out.strip()

    def start(self, argv: list[str]) -> None:
        raise LabError("pods are started by their Job: apply the manifests (lab up --runtime k8s)")

    def stop(self, grace_s: float = 10.0) -> None:
        self.kubectl("delete", "pod", self.pod(), f"--grace-period={int(grace_s)}", "--wait=false")

    def exit_code(self) -> int | None:
        phase = self.kubectl(
            "get",
            "pod",
            self.pod(),
            "-o",
            "jsonpath={.status.phase} {.status.containerStatuses[0].state.terminated.exitCode}",
        )
        state = phase.split()
        if state[:1] == ["Succeeded"]:
            return 0
        if state[:1] == ["Failed"]:
            return int(state[1]) if len(state) > 1 else 1
        return None

    def kill_node(self) -> None:
        self.kubectl("delete", "pod", self.pod(), "--grace-period=0", "--force", "--wait=false")

    def kill_worker(self, local_rank: int, sig: int = signal.SIGKILL) -> int:
        code = (
            f"import json,os; pid=json.load(open({WORKERS_FILE!r}))['pids'][{str(local_rank)!r}]; "
            f"os.kill(pid, {int(sig)}); print(pid)"
        )
        return int(self.kubectl("exec", self.pod(), "-c", "node", "--", "python", "-c", code).strip())


class KubernetesRuntime(Runtime):
    name = "k8s"
    OPTIONS = (CONTEXT, NAMESPACE, OVERLAY)

    def __init__(
        self,
        run_dir: RunDir,
        *,
        context: str | None = None,
        namespace: str = "default",
        overlay: str = "cpu-gloo",
        log: Log = print,
    ):
        super().__init__(run_dir, log=log)
        self.overlay = overlay
        self.kubectl = Kubectl(context, namespace)

    def plan(self, topology: Topology, script: str, script_args: list[str]) -> str:
        """The manifests `up` applies, rendered offline."""
        return yaml.safe_dump_all(render(self.overlay, topology, _in_image(script), script_args), sort_keys=False)

    def describe(self, node: Node) -> str:
        return "pod"

    def up(self, topology: Topology, script: str, script_args: list[str]) -> tuple[Topology, list[PodNode]]:
        manifests = self.plan(topology, script, script_args)
        self.kubectl.check_cluster()
        self.run_dir.claim()
        applied = self.run_dir.path / "applied.yaml"
        applied.write_text(manifests)
        self.run_dir.write_state(
            {
                "runtime": self.name,
                "hosts": "pods",
                "context": self.kubectl.context,
                "namespace": self.kubectl.namespace,
                "nodes": topology.nodes,
                "manifests": str(applied),
                "topology": dataclasses.asdict(topology),
                "script": script,
                "script_args": list(script_args),
                "prometheus": None,
            }
        )
        self.kubectl("apply", "-f", "-", stdin=manifests)
        self.kubectl("wait", "--for=create", "pod", "-l", f"job-name={JOB}", "--timeout=120s", timeout=150)
        nodes = self.attach()
        for node in nodes:
            node.dir.mkdir(parents=True, exist_ok=True)
            with open(node.log_path, "ab") as log:  # kubectl streams the pod's log into the run dir
                subprocess.Popen(
                    self.kubectl.argv(
                        "logs",
                        "-f",
                        f"job/{JOB}",
                        "-c",
                        "node",
                        "-l",
                        f"batch.kubernetes.io/job-completion-index={node.index}",
                    ),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, MARKER: str(self.run_dir.path)},
                )
        return topology, nodes

    def attach(self) -> list[PodNode]:
        state = self.run_dir.read_state() or {}
        if state.get("runtime") != self.name:
            return []
        kubectl = Kubectl(state.get("context"), state.get("namespace", "default"))
        return [PodNode(kubectl, i, self.run_dir.path) for i in range(state["nodes"])]

    def down(self, grace_s: float = 10.0) -> list[str]:
        state = self.run_dir.read_state() or {}
        removed = []
        if state.get("runtime") == self.name and Path(state["manifests"]).exists():
            kubectl = Kubectl(state.get("context"), state.get("namespace", "default"))
            kubectl("delete", "-f", state["manifests"], "--ignore-not-found", "--wait=false")
            removed.append(f"the objects in {state['manifests']}")
        procs.signal_all(procs.marked_pids(str(self.run_dir.path)), signal.SIGTERM)  # the log streams
        return removed + self.run_dir.take_down()


def _in_image(script: str) -> str:
    """The workload as the image knows it: the lab's own scripts by name, others as given."""
    path = Path(script)
    workloads = Path(__file__).resolve().parents[1] / "workloads"
    return path.stem if path.parent == workloads else script
