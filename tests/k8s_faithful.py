"""The rendered Job's pods, run as faithfully as this machine allows: one netns host per index.

Each pod runs the rendered container's command with its environment (the ConfigMap resolved
as envFrom does, JOB_COMPLETION_INDEX as the Job controller sets it), on a netns host named
as the pod would be (hostname torchrun-lab-<i>, DNS torchrun-lab-<i>.torchrun-lab), each
emptyDir mount a fresh folder of its own, and a /dev/shm of its own as a pod has.
`replace(i)` does what the Job controller does for an evicted pod: the old one is gone,
a new one starts on the same index with empty emptyDirs. What a cluster adds (scheduling,
the Service's DNS server, the API) is not here.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.health.events import split_echo
from lab.runtimes import netns


class FaithfulJob:
    def __init__(self, objects: list[dict], tmp_path: Path, lab_id: str, env: dict[str, str] | None = None):
        job = next(o for o in objects if o["kind"] == "Job")
        self.config = {**next(o for o in objects if o["kind"] == "ConfigMap")["data"], **(env or {})}
        pod = job["spec"]["template"]["spec"]
        self.container = pod["containers"][0]
        self.pod_volumes = {v["name"]: v for v in pod.get("volumes", [])}
        self.name, self.subdomain = job["metadata"]["name"], pod["subdomain"]
        self.count = job["spec"]["completions"]
        self.tmp = tmp_path  # the pods' logs
        # Each pod's volumes, under a path as short as a pod's own: a forkserver's socket lives
        # in the pod's TMPDIR, and an AF_UNIX path may not pass 107 bytes (pytest's tmp_path
        # under an xdist worker did).
        self.volumes = Path(tempfile.mkdtemp(prefix="tlab-pods-"))
        self.net = netns.for_lab(lab_id)
        self.procs: dict[int, subprocess.Popen] = {}
        self.incarnation = dict.fromkeys(range(self.count), 0)

    def __enter__(self) -> FaithfulJob:
        # As cluster DNS and the kubelet's /etc/hosts answer: every pod resolves the others'
        # DNS names; only a pod itself resolves its bare hostname (to its FQDN, which torch's
        # agent then advertises to the workers).
        fqdn = {i: f"{self.name}-{i}.{self.subdomain}.default.svc.cluster.local" for i in range(self.count)}
        self.net.create(
            self.count,
            aliases={i: [fqdn[i], f"{self.name}-{i}.{self.subdomain}"] for i in range(self.count)},
            own_aliases={i: [f"{self.name}-{i}"] for i in range(self.count)},
        )
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.net.destroy()
        shutil.rmtree(self.volumes, ignore_errors=True)

    def pod_dir(self, index: int) -> Path:
        return self.volumes / f"pod{index}.{self.incarnation[index]}"

    def mounts(self, index: int) -> dict[str, Path]:
        """The container's mount paths: an emptyDir is a folder of this pod's own; a claim's
        volume (ReadWriteMany, overlays/shared-checkpoints) one folder every pod shares."""
        found = {}
        for mount in self.container["volumeMounts"]:
            claim = self.pod_volumes.get(mount["name"], {}).get("persistentVolumeClaim")
            shared = self.volumes / f"claim-{claim['claimName']}" if claim else None
            found[mount["mountPath"]] = shared or self.pod_dir(index) / mount["name"]
        return found

    def log(self, index: int, incarnation: int | None = None) -> Path:
        return self.tmp / f"pod{index}.{self.incarnation[index] if incarnation is None else incarnation}.log"

    def start(self, index: int) -> None:
        mounts = self.mounts(index)
        for folder in mounts.values():
            folder.mkdir(parents=True, exist_ok=True)  # a shared claim's may exist already
        env = {**self.config, **{e["name"]: e["value"] for e in self.container["env"]}}
        # The pod's own paths: the container's env values that name a mount, and the working dir
        # inside LAB_TOPOLOGY's JSON, each in one pass (a folder put in place of one mount is never
        # taken for another). The workload's path is the image's, never a mount's (the repository
        # may well lie under /tmp, as a CI clone does).
        mounted = re.compile(r'(^|")(' + "|".join(re.escape(m) for m in mounts) + r")(?=/|$|\")")
        own = {e["name"] for e in self.container["env"]} | {"LAB_TOPOLOGY"}
        for key in own & set(env):
            env[key] = mounted.sub(lambda m: m[1] + str(mounts[m[2]]), env[key])
        env.update(JOB_COMPLETION_INDEX=str(index), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        # A pod's /tmp is its own emptyDir; here it must be said, or torch's agent leaves its
        # torchelastic_* log dir (which it never removes) in this machine's /tmp.
        env["TMPDIR"] = str(mounts["/tmp"])
        command = self.container["command"] + self.container.get("args", [])
        shim = [sys.executable, "-m", "lab.node.nodeproc", f"--exit-file={self.pod_dir(index) / 'exit'}",
                f"--hostname={self.name}-{index}", "--private-shm", "--"]  # fmt: skip
        with open(self.log(index), "w") as out:
            self.procs[index] = subprocess.Popen(
                [*netns.exec_prefix(self.net.host(index)), *shim, *command],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.tmp, start_new_session=True,
            )  # fmt: skip

    def start_all(self) -> None:
        for index in range(self.count):
            self.start(index)

    def replace(self, index: int) -> None:
        """The pod is lost (every process SIGKILLed) and the Job makes a new one, empty."""
        old = self.procs[index]
        os.killpg(old.pid, signal.SIGKILL)
        old.wait()
        self.incarnation[index] += 1
        self.start(index)

    def wait(self, timeout_s: float = 300) -> list[int]:
        deadline = time.monotonic() + timeout_s
        for p in self.procs.values():
            p.wait(max(1, deadline - time.monotonic()))
        return [self.procs[i].returncode for i in range(self.count)]

    def logs(self) -> str:
        return "".join(p.read_text() for p in sorted(self.tmp.glob("pod*.log")))

    def events(self) -> list[dict]:
        """Every rank's event record the pods echoed into their logs (what `lab`'s log follower
        writes back into rank*.jsonl files)."""
        import json

        records = []
        for line in self.logs().splitlines(keepends=True):
            echoed = split_echo(line)
            if echoed and echoed[0].startswith("rank"):
                records.append(json.loads(echoed[1]))
        return sorted(records, key=lambda r: r["time"])

    def wait_for_step(self, step: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(e["event"] == "step" and e["step"] >= step for e in self.events()):
                return
            if any(p.poll() is not None for p in self.procs.values()):
                raise AssertionError(f"a pod ended before step {step}:\n{self.logs()[-3000:]}")
            time.sleep(0.2)
        raise AssertionError(f"no rank reached step {step} in {timeout_s} s:\n{self.logs()[-3000:]}")

    def worker_pid(self, index: int, local_rank: int) -> int:
        """From the workers file the agent writes in the pod's /tmp (LAB_WORKERS_FILE)."""
        from lab.node import worker_record

        recorded = worker_record.read(self.mounts(index)["/tmp"] / "lab-workers.json")
        assert recorded, f"pod {index} has recorded no workers"
        return recorded[1][local_rank]


def pod_failure_action(job: dict, exit_code: int, conditions: tuple[str, ...] = ()) -> str:
    """What the Job controller does with a pod that failed so (Kubernetes' podFailurePolicy: the
    first rule that matches decides; none matching counts against the index's backoff). The
    rules as the rendered Job states them, read the way the controller reads them."""
    for rule in job["spec"].get("podFailurePolicy", {}).get("rules", []):
        codes = rule.get("onExitCodes")
        if codes:
            inside = exit_code in codes["values"]
            if inside == (codes["operator"] == "In"):
                return rule["action"]
        wanted = {c["type"] for c in rule.get("onPodConditions", []) if c.get("status", "True") == "True"}
        if wanted & set(conditions):
            return rule["action"]
    return "Count"
