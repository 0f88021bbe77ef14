"""The Kubernetes runtime: `lab up --runtime k8s [--context C] [--namespace NS] [--overlay O]`.

It renders an overlay of k8s/ with `kubectl kustomize` (lab.runtimes.k8s_render), writes the job's Topology into
the rendered ConfigMap (the node count into the Job, the GPUs into the pod), applies it
with kubectl, follows every index's pods into the run directory (their log, and their
events back into files: lab.runtimes.k8s_logs) and waits like any runtime. `lab down`
deletes exactly the objects it applied. Faults act through the API (lab.runtimes.k8s_node);
every kubectl call is built in lab.runtimes.kubectl. Nothing here talks to a cluster
until `up`, so `--dry-run` prints the manifests offline.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

import yaml

from lab import procs, recovery
from lab.errors import LabError
from lab.options import Option
from lab.rundir import MARKER, RunDir
from lab.runtimes import k8s_bake, pod_resources, user_image
from lab.runtimes.base import IMAGE, Log, Node, Runtime
from lab.runtimes.k8s_node import PodNode, follow_logs
from lab.runtimes.k8s_render import OVERLAY_RDZV, OVERLAYS, PodSpec, render
from lab.runtimes.kubectl import Kubectl
from lab.runtimes.plan import LaunchPlan
from lab.topology import Topology

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"
POD_DATA_DIR = "/data"  # each pod's own emptyDir (k8s/base/job.yaml)
POD_CKPT_DIR = "/data/checkpoints"  # LAB_CKPT_DIR in k8s/base/job.yaml
SHARED_DIR = "/shared"  # the ReadWriteMany volume of overlays/shared-checkpoints
CONTEXT = Option("--context", "the kubectl context (default: the current one)")
NAMESPACE = Option("--namespace", "the namespace (default %(default)s)", "default")
OVERLAY = Option("--overlay", "which k8s/overlays/ to apply (default %(default)s)", "cpu-gloo", choices=OVERLAYS)
POD_CPU = Option("--pod-cpu", "CPU each pod requests, e.g. 500m or 4 (default: the overlay's; 500m on cpu-gloo)")
POD_MEMORY = Option("--pod-memory", "memory each pod requests, e.g. 2Gi (default: the overlay's; 1Gi on cpu-gloo)")
PULL_SECRET = Option("--image-pull-secret", "a Secret of the namespace the pods pull --image with (a private registry)")


class KubernetesRuntime(Runtime):
    name = "k8s"
    NODE = PodNode
    OPTIONS = (CONTEXT, NAMESPACE, OVERLAY, IMAGE, k8s_bake.REGISTRY, PULL_SECRET, POD_CPU, POD_MEMORY)
    DRILLS = True  # the faults act through the API (lab.runtimes.k8s_node)
    SHARED_CHECKPOINTS = False  # each pod keeps its own (peer recovery); see Runtime.SHARED_CHECKPOINTS
    # Pod 0's agent hosts the rendezvous store behind the headless Service, for the lab's
    # rendezvous as for c10d; losing pod 0 ends the job either way (the elastic overlay's
    # etcd is the answer to that). An overlay with a rendezvous of its own keeps it.
    RDZV_BACKENDS = ("lab", "c10d")
    HOST_FILES = False  # a pod's files are its volumes': a drill on a script reads them from its events
    MACHINES_ELSEWHERE = True
    SCRIPT_DRILLS_NEED = (
        "--registry REG, where the lab pushes the image it bakes of the script's folder (or --image REF with "
        "the script baked in, lab image build, and --script its path in the image)"
    )

    def __init__(
        self,
        run_dir: RunDir,
        *,
        context: str | None = None,
        namespace: str = "default",
        overlay: str = "cpu-gloo",
        image: str | None = None,
        registry: str | None = None,
        image_pull_secret: str | None = None,
        pod_cpu: str | None = None,
        pod_memory: str | None = None,
        log: Log = print,
    ):
        super().__init__(run_dir, log=log)
        self.overlay = overlay
        self.kubectl = Kubectl(context, namespace)
        for value, amount in ((pod_cpu, pod_resources.cpu_amount), (pod_memory, pod_resources.memory_amount)):
            if value is not None:
                amount(value)  # a bad quantity is refused here, before anything renders
        self.pods = PodSpec(image, pod_cpu, pod_memory, image_pull_secret)
        self.registry = registry
        self.bake: k8s_bake.Bake | None = None  # a script on this machine, to bake (lab.runtimes.k8s_bake)
        self.baked: str | None = None  # its image by digest, once pushed

    def job_rendezvous(self) -> recovery.Host:
        """The overlay's: one with a rendezvous service of its own (elastic: etcd-v2) runs only that."""
        backend = OVERLAY_RDZV.get(self.overlay)
        if backend is None:
            return self.rendezvous()
        why = f"the {self.overlay} overlay's pods rendezvous on {backend}, outside every pod, so nodes can come and go"
        return recovery.Host(self.name, (backend,), why, torchrun_rdzv=backend)

    def locate_script(self, script: str) -> str:
        """The lab's own workloads are in every node image; any other script must be in the
        image --image names, at the path given (a pod sees nothing of this machine)."""
        path = Path(script)
        if path.is_file() and path.resolve().parent == WORKLOADS:
            return str(path.resolve())
        in_image = self._baking(script)
        if in_image != script:
            return in_image
        refused = k8s_bake.not_in_image(script, self.pods.image)
        if refused:
            raise LabError(refused)
        return script

    def _baking(self, script: str) -> str:
        """The script as the pods see it: one of this machine's (not the lab's own) is baked into an
        image (lab.runtimes.k8s_bake, planned once) and named by its path there; others as given."""
        if self.bake is None and k8s_bake.is_this_machines(script) and Path(script).resolve().parent != WORKLOADS:
            base = "cuda" if self.overlay == "cuda-nccl" else "cpu"
            self.bake = k8s_bake.plan(script, self.registry, self.pods.image, base)
        if self.bake and Path(script).resolve() == self.bake.script.resolve():
            return self.bake.in_image
        return script

    @classmethod
    def refuse_script_drill(cls, args: argparse.Namespace) -> None:
        """A drill on a user's script runs it from an image: one on this machine is baked and pushed
        (a registry is needed), else it is the one in --image, at its path there; its result file
        (--compare) ends with the pods' volumes."""
        image, registry = getattr(args, "image", None), getattr(args, "registry", None)
        if k8s_bake.is_this_machines(args.script):
            k8s_bake.plan(args.script, registry, image, "cpu")  # no registry to push to: one line
        elif registry:
            raise LabError(k8s_bake.NOTHING_TO_BAKE.format(script=args.script))
        elif refused := k8s_bake.not_in_image(args.script, image):
            raise LabError(refused)
        if getattr(args, "compare", None):
            raise LabError(
                "--compare on --runtime k8s: the result file stays in the pods and ends with their volumes; "
                "compare results with --runtime local, docker or ray"
            )

    def script_workdir(self, label: str) -> Path:
        """On the pods' shared volume (overlays/shared-checkpoints: every pod sees rank 0's
        checkpoint), a folder no other run has used; else in each pod's own emptyDir, fresh with it."""
        if self.overlay == "shared-checkpoints":
            return Path(SHARED_DIR) / "work" / f"{label}-{time.strftime('%Y%m%d-%H%M%S')}"
        return Path(POD_DATA_DIR) / "work" / label

    def script_workdir_note(self) -> str:
        if self.overlay == "shared-checkpoints":
            return ""
        return (
            "each pod runs your script in a working dir of its own, on its emptyDir: a checkpoint one pod "
            "writes, the others do not see; --overlay shared-checkpoints gives every pod one volume"
        )

    def plan(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        """The manifests `up` applies, rendered offline, and the pods they make; with a script to
        bake, the image by digest once pushed, else the tag it would push and a line saying so."""
        script = self._baking(script)
        if self.registry and not self.bake:
            raise LabError(k8s_bake.NOTHING_TO_BAKE.format(script=script))
        spec = replace(self.pods, image=self.baked or self.bake.tag) if self.bake else self.pods
        objects = render(self.overlay, topology, _in_image(script), script_args, spec)
        manifests = yaml.safe_dump_all(objects, sort_keys=False)
        if self.bake and not self.baked:
            manifests = f"# {self.bake.line()}\n{manifests}"
        pods = [PodNode(self.kubectl, i, self.run_dir.path) for i in range(topology.nodes)]
        own = {"context": self.kubectl.context, "namespace": self.kubectl.namespace}
        return LaunchPlan(self.name, "pods", topology, script, list(script_args), pods, manifests, own=own)

    def check(self) -> None:
        self.kubectl.check_cluster()

    def describe(self, node: Node) -> str:
        return "pod"

    def checkpoint_dir(self) -> str:
        return POD_CKPT_DIR

    def prepare(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        plan = self.plan(topology, script, script_args)
        if self.pods.image and not self.bake:
            user_image.check_digest(self.pods.image)
        self.check()
        if self.bake and not self.baked:  # a cluster answers: now the image is worth building
            self.baked = self.bake.run(self.log)
            plan = self.plan(topology, script, script_args)
        self.run_dir.claim()
        applied = self.run_dir.path / "applied.yaml"
        applied.write_text(plan.text())  # what `lab down` deletes, object for object
        plan.own["manifests"] = str(applied)
        return plan

    def provision(self, plan: LaunchPlan) -> None:
        self.kubectl.run(self.kubectl.apply(), stdin=plan.text())
        self.kubectl.run(self.kubectl.wait_pods_created(120), timeout=150)

    def start_nodes(self, plan: LaunchPlan) -> None:
        """The pods start themselves; the lab follows their logs (`lab down` stops the followers)."""
        marked = {**os.environ, MARKER: str(self.run_dir.path)}
        for node in plan.nodes:
            follow_logs(self.kubectl, node, self.run_dir.path / "events", marked)

    def rerun(self, topology: Topology, script: str, script_args: list[str], fresh: str | None = None) -> Path:
        """A new Job in place of the ended one: new pods, so new emptyDirs. A fresh run (the
        reference) starts empty as it should; a resumed one has only what the pods' volumes
        kept, which with per-pod emptyDirs is nothing (overlays/shared-checkpoints keeps it)."""
        events = self.run_dir.path / (f"{fresh}/events" if fresh else "events")
        topology = topology.replace(rdzv_id=f"{topology.rdzv_id}-{fresh or 'rerun'}")
        manifests = self.plan(topology, script, script_args).text()
        self.kubectl.run(self.kubectl.delete_job(120), timeout=150)
        (self.run_dir.path / "applied.yaml").write_text(manifests)
        self.kubectl.run(self.kubectl.apply(), stdin=manifests)
        self.kubectl.run(self.kubectl.wait_pods_created(120), timeout=150)
        marked = {**os.environ, MARKER: str(self.run_dir.path)}
        for node in self.attach():
            follow_logs(self.kubectl, node, events, marked)
        return events

    def attach(self) -> list[PodNode]:
        state = self.run_dir.read_state() or {}
        if state.get("runtime") != self.name:
            return []
        kubectl = Kubectl(state.get("context"), state.get("namespace", "default"))
        return [PodNode(kubectl, n["index"], self.run_dir.path) for n in state.get("nodes", [])]

    def down(self, grace_s: float = 10.0) -> list[str]:
        state = self.run_dir.read_state() or {}
        removed = []
        if state.get("runtime") == self.name and Path(state["manifests"]).exists():
            kubectl = Kubectl(state.get("context"), state.get("namespace", "default"))
            kubectl.run(kubectl.delete_manifests(state["manifests"]))
            removed.append(f"the objects in {state['manifests']}")
        followers = procs.marked_pids(str(self.run_dir.path))  # the log followers
        procs.terminate(followers, grace_s=2.0, run_dir=str(self.run_dir.path))
        return removed + self.run_dir.take_down()


def _in_image(script: str) -> str:
    """The workload as the image knows it: the lab's own scripts by name, others as given."""
    path = Path(script)
    return path.stem if path.parent == WORKLOADS else script
