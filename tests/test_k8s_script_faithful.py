"""A drill on a user's own script in pods, as `lab exercise run kill-worker --runtime k8s
--registry REG --script PATH` renders it, run on the faithful pods of tests/k8s_faithful.py.

The manifests come from the code the drill runs (ScriptRun's topology, the runtime's working
dir for the run, recovery.choose, KubernetesRuntime.plan): the script's folder baked into an
image, the pods running it at its path there, /opt/user/user_scripts/ (the faithful pods have
no image: they are handed this repository's copy of the folder, which the image would hold).
A worker is SIGKILLed at epoch 3, and the script's judge draws the verdict from the events the
pods echoed into their logs, as the drill reads them on a cluster. Two outcomes, both the
truth of a cluster: with one ReadWriteMany volume for every pod (overlays/shared-checkpoints)
the tutorial script resumes from rank 0's snapshot; with a volume per pod (the default) pod
1's ranks find no snapshot, start from epoch 0, and the drill says the resume failed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, needs_netns
from k8s_faithful import FaithfulJob

from lab import recovery
from lab.exercises import DrillOptions, kill_worker
from lab.exercises.script import judge
from lab.exercises.script.script_run import ScriptRun
from lab.exercises.script.spec import ScriptSpec
from lab.exercises.seen import Seen
from lab.rundir import RunDir
from lab.runtimes.k8s import KubernetesRuntime
from lab.topology import Topology

pytestmark = [
    pytest.mark.slow,
    needs_netns,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (make host-deps)"),
    pytest.mark.xdist_group("k8s-faithful"),
]
SCRIPT = REPO / "tests" / "user_scripts" / "snapshot_every_epoch.py"
TARGET, AT_EPOCH = 3, 3  # rank 3: pod 1's second worker


def drill_job(tmp_path: Path, overlay: str) -> tuple[list[dict], ScriptRun]:
    """The objects `lab exercise run kill-worker --runtime k8s --overlay OVERLAY --registry ...
    --script SCRIPT --ckpt-dir . -- --epochs 8` applies, and the run that judges them."""
    runtime = KubernetesRuntime(RunDir(tmp_path / "run"), overlay=overlay, registry="registry.example/team")
    spec = ScriptSpec(path=str(SCRIPT), args=("--epochs", "8", "--epoch-time", "0.4"), ckpt_dir=".")
    workdir, note = runtime.script_workdir(kill_worker.NAME), runtime.script_workdir_note()
    run = ScriptRun(spec, kill_worker, Topology(), workdir, tmp_path / "keep", host_files=False, workdir_note=note)
    options = DrillOptions(TARGET, AT_EPOCH)
    topology, how = recovery.choose(run.topology(options), "auto", runtime.job_rendezvous())
    assert how.style == "restart"
    manifests = runtime.plan(topology.replace(max_restarts=2), spec.path, list(spec.args)).text()
    objects = [o for o in yaml.safe_load_all(manifests) if o]
    config = next(o for o in objects if o["kind"] == "ConfigMap")["data"]
    assert config["LAB_WORKLOAD"] == f"/opt/user/user_scripts/{SCRIPT.name}"  # in the image, not this machine's
    config["LAB_WORKLOAD"] = str(SCRIPT)  # the folder the image would hold, for pods that have no image
    return objects, run


def kill_at_epoch(job: FaithfulJob, run: ScriptRun, deadline_s: float = 180) -> Seen:
    """What the drill does and gathers: fire at the target's epoch, SIGKILL its worker, wait for
    the end or the deadline (as the drill's --deadline: the pods still running then are None)."""
    job.start_all()
    job.wait_for_step(AT_EPOCH)
    killed = time.time()
    os.kill(job.worker_pid(1, 1), signal.SIGKILL)
    until = time.monotonic() + deadline_s
    while time.monotonic() < until and any(p.poll() is None for p in job.procs.values()):
        time.sleep(0.5)
    codes = [job.procs[i].poll() for i in range(job.count)]
    fault = {"fault": "kill_worker", "time": killed, "node": "torchrun-lab-1", "rank": TARGET}
    extra = {
        "script": run.spec.path, "script_args": list(run.spec.args), "deadline_s": deadline_s,
        "workdir": str(run.workdir), "ckpt_dir": ".", "found_at_start": run.found_at_start, "own_workdir": False,
        "workdir_note": run.workdir_note,
        "fire": {"source": "output", "unit": "epoch", "value": AT_EPOCH, "rank": TARGET}, "target": TARGET,
        "recovery": kill_worker.SCRIPT_RECOVERY, "rerun": False, "forensics": None, "fault": fault,
    }  # fmt: skip
    seen = Seen("kill-worker", "k8s", run.base_topology, faults=[fault], extra=extra)
    seen.codes = {f"torchrun-lab-{i}": code for i, code in enumerate(codes)}
    seen.events = job.events()
    return seen


def test_on_a_shared_volume_the_script_resumes_from_rank_0s_snapshot(tmp_path):
    objects, run = drill_job(tmp_path, "shared-checkpoints")
    assert str(run.workdir).startswith("/shared/work/kill-worker-")
    with FaithfulJob(objects, tmp_path, "ee0c5") as job:
        seen = kill_at_epoch(job, run)
        kept = {p.name for p in job.mounts(0)["/shared"].rglob("*.pt")}
    report = judge.judge(seen)
    assert report.verdict == "pass", (report.facts["finding"], job.logs()[-3000:])
    assert report.facts["restarts"] >= 1 and report.facts["loaded_after_fault"]
    assert report.facts["work_redone"]["count"] <= 1, report.facts["work_redone"]
    assert {"snapshot.pt", "result.pt"} <= kept, "the script ran in the working dir on the shared volume"


def test_with_a_volume_per_pod_the_drill_says_the_ranks_resumed_apart_and_why(tmp_path):
    """Pod 0's ranks resume from rank 0's snapshot, pod 1's find none and start from epoch 0; the
    job then waits on collectives that never pair up (the drill would call it stuck at its
    deadline: 12 s here, as --deadline 12)."""
    objects, run = drill_job(tmp_path, "cpu-gloo")
    assert str(run.workdir) == "/data/work/kill-worker"
    with FaithfulJob(objects, tmp_path, "ee0c6") as job:
        seen = kill_at_epoch(job, run, deadline_s=12)
        in_pod1 = {p.name for p in (job.mounts(1)["/data"] / "work" / "kill-worker").iterdir()}
    report = judge.judge(seen)
    assert "snapshot.pt" not in in_pod1, "pod 1 has a working dir of its own, without rank 0's snapshot"
    assert report.verdict == "fail" and report.facts["restarts"] >= 1
    finding = report.facts["finding"]
    assert finding.startswith("every rank resumed at the same step: no. the ranks resumed apart"), finding
    assert re.search(r"ranks 2, 3 at epoch 0; ranks 0, 1 at epoch [3-9]", finding), finding
    assert "--overlay shared-checkpoints" in finding
