"""Every kubectl command the lab runs, built in one place.

Each method of `Kubectl` that is not `run` or `check_cluster` returns the argv of one call
the k8s runtime, its log follower or a drill makes. tests/test_k8s_kubectl.py runs every
one of them through the real kubectl client against an address nobody answers: each must
fail on the connection, never on kubectl's own reading of its arguments.
"""

from __future__ import annotations

import json
import shutil
import subprocess

from lab.errors import LabError

JOB = "torchrun-lab"
CONTAINER = "node"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
# A pod with this label is cut off by the NetworkPolicies of k8s/base (the partition drill).
PARTITION_LABEL = "torchrun-lab/partitioned"


TELLING = ("refused", "Unable to connect", "no such host", "i/o timeout", "Unauthorized", "Forbidden", "certificate")


def reason(stderr: str) -> str:
    """The line of kubectl's complaint that says what is wrong (it may print several)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if any("Please enter Username" in line for line in lines):
        return "the context has no credentials (kubectl asked for a username)"
    telling = [line for line in lines for key in TELLING if key in line]
    return telling[-1] if telling else (lines[-1] if lines else "no output")


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

    def _argv(self, *args: str) -> list[str]:
        context = [f"--context={self.context}"] if self.context else []
        return [kubectl_exe(), *context, f"--namespace={self.namespace}", *args]

    # The calls ----------------------------------------------------------------------------

    def version(self) -> list[str]:
        return self._argv("version", "--request-timeout=5s", "-o", "json")

    def apply(self) -> list[str]:
        """The manifests on stdin."""
        return self._argv("apply", "-f", "-")

    def wait_pods_created(self, timeout_s: int) -> list[str]:
        return self._argv("wait", "--for=create", "pod", "-l", f"job-name={JOB}", f"--timeout={timeout_s}s")

    def index_pods(self, index: int) -> list[str]:
        """`NAME PHASE` per line, oldest first, of every pod the Job made for one index."""
        return self._argv(
            "get",
            "pods",
            "-l",
            f"job-name={JOB},{INDEX_LABEL}={index}",
            "--sort-by=.metadata.creationTimestamp",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{'\\n'}{end}",
        )

    def pod_state(self, pod: str) -> list[str]:
        """`PHASE [EXIT_CODE]` of the pod's node container."""
        return self._argv(
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.status.phase} {.status.containerStatuses[0].state.terminated.exitCode}",
        )

    def job_conditions(self) -> list[str]:
        """The Job's true conditions (Complete, Failed, ...), space-separated."""
        return self._argv("get", "job", JOB, "-o", 'jsonpath={.status.conditions[?(@.status=="True")].type}')

    def logs(self, pod: str, since_time: str | None = None) -> list[str]:
        """Follow one pod's node container (a pod name, never a selector: kubectl takes one or the other)."""
        since = [f"--since-time={since_time}"] if since_time else []
        return self._argv("logs", pod, "-c", CONTAINER, "--follow", *since)

    def exec(self, pod: str, *command: str) -> list[str]:
        return self._argv("exec", pod, "-c", CONTAINER, "--", *command)

    def evict(self, pod: str) -> list[str]:
        """An API-initiated eviction (body: eviction_body): the pod gets the DisruptionTarget
        condition, which the Job's podFailurePolicy ignores, so the Job replaces it."""
        return self._argv("create", "--raw", f"/api/v1/namespaces/{self.namespace}/pods/{pod}/eviction", "-f", "-")

    def eviction_body(self, pod: str, grace_s: int) -> str:
        return json.dumps(
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod, "namespace": self.namespace},
                "deleteOptions": {"gracePeriodSeconds": grace_s},
            }
        )

    def label_partitioned(self, pod: str, on: bool) -> list[str]:
        value = f"{PARTITION_LABEL}=true" if on else f"{PARTITION_LABEL}-"
        return self._argv("label", "pod", pod, value, "--overwrite")

    def delete_job(self, timeout_s: int) -> list[str]:
        """The Job and its pods, waited for (the ConfigMap, Service and policies stay)."""
        return self._argv("delete", "job", JOB, "--cascade=foreground", "--ignore-not-found", f"--timeout={timeout_s}s")

    def delete_manifests(self, path: str) -> list[str]:
        return self._argv("delete", "-f", path, "--ignore-not-found", "--wait=false")

    # Running them -------------------------------------------------------------------------

    def run(self, argv: list[str], stdin: str | None = None, timeout: float = 60) -> str:
        # stdin never the terminal's: kubectl would stop there to ask for credentials.
        feed = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **feed)
        if done.returncode != 0:
            verb = argv[argv.index(f"--namespace={self.namespace}") + 1]
            raise LabError(f"kubectl {verb} failed: {reason(done.stderr)}")
        return done.stdout

    def check_cluster(self) -> None:
        done = subprocess.run(self.version(), capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        if done.returncode != 0 or '"serverVersion"' not in done.stdout:
            where = f"context {self.context!r}" if self.context else "the current kubectl context"
            raise LabError(f"no reachable Kubernetes cluster in {where}: {reason(done.stderr)}")
