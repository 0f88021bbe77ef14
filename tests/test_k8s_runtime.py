"""The k8s runtime's offline half: what `lab up|run --runtime k8s --dry-run` renders from the
user's choices (topology, recovery style, image, script, requests, the overlay), and the
one-line errors before anything is applied: a script no pod can see, a bad request, no
kubectl, no cluster. The manifests themselves are checked in test_k8s.py."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, lab_in_process
from test_cli_errors import assert_one_line_error
from test_k8s import OVERLAYS, kustomize, needs_kubectl

from lab.node import k8s_pod


@needs_kubectl
def test_k8s_dry_run_prints_the_manifests_with_the_chosen_topology(lab):
    out = lab("up", "--runtime", "k8s", "--dry-run", "--nodes", "3", "--max-restarts", "1")
    assert out.returncode == 0, out.stderr
    objs = [o for o in yaml.safe_load_all(out.stdout) if o]
    job = next(o for o in objs if o["kind"] == "Job")
    config = next(o for o in objs if o["kind"] == "ConfigMap")["data"]
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3
    assert json.loads(config["LAB_TOPOLOGY"])["max_restarts"] == 1 and config["LAB_WORKLOAD"] == "ddp_train"


def rendered_topology(out: subprocess.CompletedProcess) -> dict:
    objs = [o for o in yaml.safe_load_all(out.stdout) if o]
    return json.loads(next(o for o in objs if o["kind"] == "ConfigMap")["data"]["LAB_TOPOLOGY"])


@needs_kubectl
@pytest.mark.parametrize(
    ("args", "style", "rendezvous", "min_nodes"),
    [
        ([], "restart", "lab", None),  # the default: the lab's store in pod 0's agent
        (["--recovery", "torchrun"], "torchrun", "c10d", None),
        (["--overlay", "chaos"], "restart", "lab", None),  # an overlay on cpu-gloo: pod 0 hosts it too
        (["--overlay", "elastic"], "torchrun", "etcd-v2", 1),  # the overlay's own rendezvous and range
        (["--overlay", "elastic", "--nodes", "3"], "torchrun", "etcd-v2", 1),
    ],
)
def test_the_pods_rendezvous_is_the_chosen_recovery_style_unless_the_overlay_has_its_own(
    lab, args, style, rendezvous, min_nodes
):
    out = lab("up", "--runtime", "k8s", "--dry-run", *args)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"# recovery: {style} ("), out.stdout[:300]
    fields = rendered_topology(out)
    assert fields["rdzv_backend"] == rendezvous and fields.get("min_nodes") == min_nodes


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_runtime_knows_which_overlays_bring_their_own_rendezvous(overlay):
    """lab.runtimes.k8s.OVERLAY_RDZV against what each overlay's ConfigMap renders: any other
    overlay's pods rendezvous on pod 0 (c10d, or the lab's when the recovery style says so)."""
    from lab.runtimes.k8s import OVERLAY_RDZV

    config = next(o for o in yaml.safe_load_all(kustomize(overlay)) if o and o["kind"] == "ConfigMap")
    backend = json.loads(config["data"]["LAB_TOPOLOGY"])["rdzv_backend"]
    assert backend == OVERLAY_RDZV.get(overlay, "c10d")


@needs_kubectl
def test_your_own_image_script_and_requests_are_what_the_pods_run(lab, capsys):
    """--image and the script's path in it, --pod-cpu and --pod-memory: in the manifests `up`
    would apply. A request above the overlay's limit raises the limit with it."""
    out = lab_in_process(
        capsys, "run", "--runtime", "k8s", "--dry-run", "--image", "registry.example/team/train:1",
        "--pod-cpu", "3", "--pod-memory", "512Mi", "--run-dir", str(lab.run_dir),
        "/app/train.py", "--epochs", "2", "--note", "a b",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    objs = [o for o in yaml.safe_load_all(out.stdout) if o]
    container = next(o for o in objs if o["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]
    config = next(o for o in objs if o["kind"] == "ConfigMap")["data"]
    assert container["image"] == "registry.example/team/train:1"
    assert container["resources"]["requests"] == {"cpu": "3", "memory": "512Mi"}
    assert container["resources"]["limits"] == {"cpu": "3", "memory": "4Gi"}  # cpu raised to the request
    assert config["LAB_WORKLOAD"] == "/app/train.py" and config["LAB_WORKLOAD_ARGS"] == "--epochs 2 --note 'a b'"
    argv = k8s_pod.argv_from_env({**config, "JOB_COMPLETION_INDEX": "0"})
    assert argv[-5:] == ["/app/train.py", "--epochs", "2", "--note", "a b"]  # quoted in the ConfigMap, whole in the pod
    assert not lab.run_dir.exists()


@needs_kubectl
@pytest.mark.parametrize("where", [["--registry", "127.0.0.1:5000/team"], ["--image", "127.0.0.1:5000/team/lab:1"]])
def test_a_script_on_this_machine_is_baked_into_an_image_and_the_dry_run_says_so_building_nothing(lab, where):
    """No host path reaches a pod: the Job names the image the lab would push (its registry from
    --registry, or --image's) and the script's path in it; the dry run builds and pushes nothing
    (tests/test_registry.py runs the bake itself)."""
    script = REPO / "tests" / "user_scripts" / "snapshot_every_epoch.py"
    out = lab("run", "--runtime", "k8s", *where, "--nodes", "2", "--nproc-per-node", "1", "--dry-run", str(script))
    assert out.returncode == 0, out.stderr
    registry = "127.0.0.1:5000/team" if where[0] == "--registry" else "127.0.0.1:5000"
    said = re.search(
        r"^# would build (\S+) FROM torchrun-lab:cpu as (\S+) and push it; the Job names it", out.stdout, re.M
    )
    assert said and said[1] == str(script.parent), out.stdout[:500]
    assert re.fullmatch(rf"{re.escape(registry)}/torchrun-lab-user-user-scripts:\d{{8}}-\d{{6}}", said[2])
    objs = [o for o in yaml.safe_load_all(out.stdout) if o]
    job = next(o for o in objs if o["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == said[2]
    assert next(o for o in objs if o["kind"] == "ConfigMap")["data"]["LAB_WORKLOAD"] == (
        "/opt/user/user_scripts/snapshot_every_epoch.py"
    )
    assert str(REPO) not in yaml.safe_dump_all(objs)  # the comment says what is built; no object names it
    images = subprocess.run(["docker", "images", "-q", said[2]], capture_output=True, text=True)
    assert images.stdout.strip() == ""
    assert not lab.run_dir.exists()


@needs_kubectl
@pytest.mark.parametrize(
    ("args", "words"),
    [
        # A script on this machine is baked and pushed (test_a_script_on_this_machine_...): where to, said.
        ([str(REPO / "tests" / "scripts" / "hold.py")], ["a pod cannot see", "--registry", "lab image build"]),
        (["--image", "my:1", str(REPO / "tests" / "scripts" / "hold.py")], ["a pod cannot see", "--registry"]),
        (["--registry", "Not A Registry!", str(REPO / "tests" / "scripts" / "hold.py")], ["is not a registry"]),
        (["/app/train.py"], ["no file on this machine", "the lab's image has no such script"]),
        (["--registry", "r.example:5000", "--image", "my:1", "/app/train.py"], ["drop --registry"]),
        (["--image", "my:1", "train.py"], ["absolute path inside the image"]),
        (["--pod-cpu", "two", "/app/train.py"], ["--pod-cpu", "not a CPU quantity"]),
        (["--pod-memory=0Gi", "/app/train.py"], ["--pod-memory", "not a memory quantity"]),
    ],
)
def test_a_script_no_pod_can_see_or_a_bad_request_is_one_line(lab, capsys, args, words):
    out = lab_in_process(capsys, "run", "--runtime", "k8s", "--dry-run", "--run-dir", str(lab.run_dir), *args)
    assert_one_line_error(out, *words)
    assert not lab.run_dir.exists()


def test_k8s_without_kubectl_or_a_cluster_is_a_one_line_error(lab, tmp_path):
    no_kubectl = lab.env() | {"PATH": str(Path(sys.executable).parent)}
    out = subprocess.run(lab.cmd("up", "--runtime", "k8s"), env=no_kubectl, capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "kubectl is not installed" in out.stderr
    if shutil.which("kubectl"):
        config = tmp_path / "kubeconfig"
        config.write_text(
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
            "contexts: [{name: c, context: {cluster: c}}]\ncurrent-context: c\nusers: []\n"
        )
        out = subprocess.run(
            lab.cmd("up", "--runtime", "k8s"),
            env=lab.env() | {"KUBECONFIG": str(config)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 1 and out.stderr.count("\n") == 1
        assert "no reachable Kubernetes cluster" in out.stderr
