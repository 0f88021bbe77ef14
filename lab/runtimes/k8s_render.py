"""The k8s runtime's manifests, rendered offline: an overlay of k8s/ through `kubectl kustomize`,
with the job's topology, node count, workload, image and requests written into it."""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from lab.errors import LabError
from lab.runtimes import pod_resources
from lab.runtimes.kubectl import kubectl_exe
from lab.topology import Topology

K8S_DIR = Path(__file__).resolve().parents[2] / "k8s"
OVERLAYS = ("cpu-gloo", "cuda-nccl", "elastic", "monitoring", "chaos", "shared-checkpoints")
# Overlays whose pods rendezvous on a service of their own, not on pod 0 (k8s/overlays/*/).
OVERLAY_RDZV = {"elastic": "etcd-v2"}
GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class PodSpec:
    """What the user chose for the pods, over the overlay's: image and requests."""

    image: str | None = None
    cpu: str | None = None
    memory: str | None = None
    pull_secret: str | None = None


def render(
    overlay: str, topology: Topology, script: str, script_args: list[str], pods: PodSpec = PodSpec()
) -> list[dict]:
    """The overlay's objects, with this job's topology, node count, workload, image and requests in them."""
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
                LAB_TOPOLOGY=json.dumps(fields), LAB_WORKLOAD=script, LAB_WORKLOAD_ARGS=shlex.join(script_args)
            )
        if obj["kind"] == "Job":
            obj["spec"]["completions"] = obj["spec"]["parallelism"] = topology.nodes
            set_gpus(obj, topology.gpus_per_node)
            pod_resources.set_requests(obj, pods.cpu, pods.memory)
            pod = obj["spec"]["template"]["spec"]
            if pods.image:
                pod["containers"][0]["image"] = pods.image
            if pods.pull_secret:
                pod["imagePullSecrets"] = [{"name": pods.pull_secret}]
    return objects


def set_gpus(job: dict, gpus: int | None) -> None:
    """--gpus-per-node: the GPUs each pod requests. The pod runs one worker per GPU it sees
    ("nproc_per_node": "gpu"), so torchrun is told exactly what was requested."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    resources = container.get("resources", {})
    if gpus is None or GPU not in resources.get("limits", {}):
        return
    for kind in ("requests", "limits"):
        resources[kind][GPU] = gpus


def pod_fields(topology: Topology, rendered: dict) -> dict:
    """The user's topology choices, keeping what the overlay decides (endpoint, ports, the
    collective backend, a rendezvous service of its own and the elastic range it serves).
    Pod 0's store is either the lab's rendezvous or c10d: the chosen recovery style picks."""
    keep = {"rdzv_host", "rdzv_port", "metrics_ports", "backend"}
    if rendered.get("rdzv_backend") in OVERLAY_RDZV.values():
        keep |= {"rdzv_backend"} | ({"min_nodes"} if topology.min_nodes is None else set())
    chosen = {k: v for k, v in topology.__dict__.items() if k not in keep}
    if rendered.get("nproc_per_node") == "gpu":
        chosen.pop("nproc_per_node")
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in chosen.items()}
