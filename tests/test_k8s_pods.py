"""What the k8s runtime asks of a pod, checked on the rendered manifests: the GPUs it requests against
the workers torchrun is told to start, the paths the drill faults reach into, and a drill's refusal
when no cluster answers. (The manifests as a whole: test_k8s.py; every kubectl call: test_k8s_kubectl.py.)"""

import json
import subprocess

import pytest
import yaml
from test_k8s import needs_kubectl, objects

from lab.node import k8s_pod


@needs_kubectl
@pytest.mark.parametrize("gpus", [1, 4, 8])
def test_gpu_pods_request_what_torchrun_is_told(lab, gpus, monkeypatch):
    """The cuda-nccl pod requests --gpus-per-node GPUs; the pod runs one worker per GPU it sees.
    The device plugin makes a pod see exactly what it requested: torch.cuda.device_count() is
    set to that here (no GPU on this machine), and the rendered torchrun command must match."""
    out = lab("up", "--runtime", "k8s", "--overlay", "cuda-nccl", "--gpus-per-node", str(gpus), "--dry-run")
    assert out.returncode == 0, out.stderr
    objs = [o for o in yaml.safe_load_all(out.stdout) if o]
    job = next(o for o in objs if o["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    resources = container["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == gpus
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NCCL_SOCKET_IFNAME"] and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    shm = next(m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm")
    volume = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == shm["name"])
    assert volume["emptyDir"]["medium"] == "Memory"
    config = next(o for o in objs if o["kind"] == "ConfigMap")["data"]
    assert json.loads(config["LAB_TOPOLOGY"])["nproc_per_node"] == "gpu"
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    argv = k8s_pod.argv_from_env({**config, "JOB_COMPLETION_INDEX": "1"})
    assert f"--nproc-per-node={gpus}" in argv and "--nnodes=2" in argv


@pytest.mark.slow
@needs_kubectl
def test_a_drill_on_k8s_without_a_cluster_is_a_one_line_error_and_leaves_nothing(lab, tmp_path):
    """`lab exercise run NAME --runtime k8s` takes the k8s flags and reaches for the cluster; with
    none answering it fails in one line, after taking down the local Ray it started."""
    from lab import procs

    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c}}]\ncurrent-context: c\nusers: []\n"
    )
    out = subprocess.run(
        lab.cmd("exercise", "run", "kill-worker", "--runtime", "k8s", "--namespace", "drills", "--overlay", "chaos"),
        env=lab.env() | {"KUBECONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "no reachable Kubernetes cluster" in out.stderr
    assert not lab.run_dir.exists() and procs.marked_pids(str(lab.run_dir)) == []


@needs_kubectl
def test_the_paths_the_k8s_faults_reach_into_are_the_pods_own():
    """A drill's kubectl exec names files in the pod: they must be where the pod template puts them."""
    from lab.runtimes import k8s, k8s_node

    job = next(o for o in objects("cpu-gloo") if o["kind"] == "Job")
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LAB_CKPT_DIR"] == k8s.POD_CKPT_DIR and env["LAB_WORKERS_FILE"] == k8s_node.WORKERS_FILE
    assert env["LAB_EVENTS_ECHO"] == "1", "the log follower reads the pods' progress from their logs"
