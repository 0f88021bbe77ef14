"""Drills on the rendered pod template: the Job's pods run on netns hosts (tests/k8s_faithful.py),
each with emptyDirs of its own, and break as they would on a cluster.

A worker killed in a pod: torchrun restarts the group inside the pods, through the lab's
rendezvous (the default recovery style, as `lab up --runtime k8s` renders it). A pod lost and
replaced by the Job controller: the new pod starts with empty dirs, the survivor's group
restarts, both meet in the next rendezvous round, and the newest checkpoint comes back
to the new pod from a peer. Each ends bit-identical to the uninterrupted run of the same
template. The kubectl calls a cluster drill makes are checked in test_k8s_kubectl.py; here
is what they would set off.
"""

import os
import re
import shutil
import signal

import pytest
import yaml
from conftest import needs_netns
from k8s_faithful import FaithfulJob, pod_failure_action

from lab import recovery
from lab.node.restart_budget import CRASH_LOOP_EXIT
from lab.runtimes.k8s import KubernetesRuntime, render
from lab.topology import Topology

pytestmark = [
    pytest.mark.slow,
    needs_netns,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (make host-deps)"),
    pytest.mark.xdist_group("k8s-faithful"),  # one worker runs the module's reference and its users
]
STEPS, EVERY = 60, 10
PACED = {"LAB_WORKLOAD_ARGS": f"--steps {STEPS} --ckpt-every {EVERY} --step-time 0.1"}


def objects(overlay: str = "cpu-gloo") -> list[dict]:
    """The overlay as `lab up --runtime k8s` renders it for the trainer: the default recovery
    style, the lab's tuned restart (pod 0's agent hosts the lab's rendezvous store)."""
    topology, how = recovery.choose(Topology(max_restarts=3), "auto", KubernetesRuntime.rendezvous())
    assert how.style == "restart" and topology.rdzv_backend == "lab"
    rendered = render(overlay, topology, "trainer", [])
    return [o for o in yaml.safe_load_all(yaml.safe_dump_all(rendered)) if o]


def final_checksums(logs: str) -> dict[int, str]:
    found = re.findall(rf"rank (\d+) local_rank \d+ host \S+ checksum \S+ \((\S+)\) at step {STEPS}", logs)
    return {int(rank): exact for rank, exact in found}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> str:
    """The uninterrupted run: the same template, unpaced."""
    with FaithfulJob(objects(), tmp_path_factory.mktemp("ref"), "ee0c1", {"LAB_WORKLOAD_ARGS": f"--steps {STEPS} "
                     f"--ckpt-every {EVERY}"}) as job:  # fmt: skip
        job.start_all()
        assert job.wait() == [0, 0], job.logs()[-3000:]
        sums = final_checksums(job.logs())
    assert sorted(sums) == [0, 1, 2, 3] and len(set(sums.values())) == 1
    return next(iter(sums.values()))


def test_a_worker_killed_in_a_pod_restarts_the_group_and_ends_bit_identical(tmp_path, reference):
    with FaithfulJob(objects(), tmp_path, "ee0c2", PACED) as job:
        job.start_all()
        job.wait_for_step(25)
        os.kill(job.worker_pid(1, 1), signal.SIGKILL)
        assert job.wait() == [0, 0], job.logs()[-3000:]
        events = job.events()
    assert max(e["restart"] for e in events) == 1
    loaded = {e["step"] for e in events if e["event"] == "checkpoint_loaded" and e["restart"] == 1}
    assert len(loaded) == 1 and loaded.pop() >= 20
    assert set(final_checksums(job.logs()).values()) == {reference}


def test_a_replaced_pod_starts_empty_gets_the_checkpoint_from_a_peer_and_ends_bit_identical(tmp_path, reference):
    """Pod 1: pod 0 hosts the rendezvous store (the lab's, as c10d's would be), and losing it ends
    the job (kill-rendezvous-host; the elastic overlay's etcd rendezvous is the answer to that).
    The new pod's agent joins the round after the last complete one."""
    index = 1
    with FaithfulJob(objects(), tmp_path, "ee0c3", PACED) as job:
        job.start_all()
        job.wait_for_step(25)
        job.replace(index)  # evicted: gone at once, and the Job makes a new, empty pod
        codes = job.wait()
        logs, events = job.logs(), job.events()
        kept = sorted(p.name for p in (job.mounts(index)["/data"] / "checkpoints").iterdir())
    assert codes == [0, 0], logs[-3000:]
    received = [e for e in events if e["event"] == "checkpoint_received"]
    assert received and {e["node"] for e in received} == {f"torchrun-lab-{index}"}
    assert received[0]["step"] >= 20
    assert f"step_{STEPS:08d}.ckpt" in kept, "the new pod keeps its own copies from then on"
    assert set(final_checksums(logs).values()) == {reference}


def test_a_crash_looping_pod_exits_86_and_its_job_fails_rather_than_replacing_it(tmp_path):
    """Workers that die at every start (a bad argument: no step, ever) under the pod's agent:
    after --max-restarts 3 restarts without progress it stops with the crash-loop exit, and the
    rendered Job's failure policy fails the Job on that code: no new pod, whose fresh agent would
    start the count again. A disruption, by contrast, is ignored (the index gets a new pod)."""
    rendered = objects()
    job = next(o for o in rendered if o["kind"] == "Job")
    with FaithfulJob(rendered, tmp_path, "ee0c4", {"LAB_WORKLOAD_ARGS": "--steps not-a-number"}) as pods:
        pods.start_all()
        codes = pods.wait(timeout_s=180)
        logs = pods.logs()
    assert CRASH_LOOP_EXIT in codes, logs[-3000:]
    assert "crash loop: no progress in 3 restarts" in logs
    assert {pod_failure_action(job, code) for code in codes if code} == {"FailJob"}
    assert pod_failure_action(job, 137, ("DisruptionTarget",)) == "Ignore"
    assert pod_failure_action(job, 137) == "Count"
