"""`make images REGISTRY=... PUSH=1` against a real registry: Debian's docker-registry (the
reference Distribution registry) on 127.0.0.1, which the Docker daemon may push to over plain
HTTP. The images are pushed, the registry's catalog and manifest digest are read back over its
API, and the Kubernetes manifests name the image by that digest, with a pull secret.

One registry serves the module, in one worker: the user's image, FROM the lab's, then finds the
lab's layers there, as a team's registry holds them, and the daemon mounts them instead of
compressing and uploading a gigabyte again."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request

import pytest
import yaml
from docker_support import build_images
from registry_support import needs_registry, serving

from lab.bench import free_port
from lab.rundir import RunDir
from lab.runtimes.k8s import KubernetesRuntime
from lab.runtimes.user_image import MANIFEST_TYPES
from lab.topology import Topology

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    needs_registry,
    pytest.mark.xdist_group("registry"),  # one worker, one registry
]
MANIFESTS = MANIFEST_TYPES


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A registry of this module's own (registry_support); afterwards, the tags its pushes made in
    the daemon are removed, and only those."""
    with serving(tmp_path_factory.mktemp("registry")) as address:
        try:
            yield address
        finally:
            tags = subprocess.run(
                ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True
            )
            mine = [t for t in tags.stdout.split() if t.startswith(f"{address}/")]
            if mine:
                subprocess.run(["docker", "rmi", *mine], capture_output=True, timeout=120)


def test_images_are_pushed_read_back_by_digest_and_named_so_in_the_manifests(images, registry, lab):
    pushed = build_images("cpu", REGISTRY=registry, PUSH="1")
    refs = dict(re.findall(rf"^pushed {re.escape(registry)}/(\S+) as (\S+@sha256:[0-9a-f]{{64}})$", pushed, re.M))
    assert set(refs) == {"torchrun-lab:cpu", "torchrun-lab-prometheus:2.42"}, pushed

    with urllib.request.urlopen(f"http://{registry}/v2/_catalog", timeout=10) as answer:
        catalog = set(json.load(answer)["repositories"])
    assert (
        {"torchrun-lab", "torchrun-lab-prometheus"}
        <= catalog
        <= {"torchrun-lab", "torchrun-lab-prometheus", "team/train"}
    )
    ask = urllib.request.Request(
        f"http://{registry}/v2/torchrun-lab/manifests/cpu", method="HEAD", headers={"Accept": MANIFESTS}
    )
    with urllib.request.urlopen(ask, timeout=10) as answer:
        digest = answer.headers["Docker-Content-Digest"]
    assert refs["torchrun-lab:cpu"] == f"{registry}/torchrun-lab@{digest}"

    out = lab(
        "up", "--runtime", "k8s", "--dry-run", "--image", refs["torchrun-lab:cpu"], "--image-pull-secret", "regcred"
    )
    assert out.returncode == 0, out.stderr
    pod = next(o for o in yaml.safe_load_all(out.stdout) if o and o["kind"] == "Job")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == f"{registry}/torchrun-lab@{digest}"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


DDP_SCRIPT = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
where = os.path.dirname(__file__)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} in {where}: sum {total.item():g}", flush=True)
dist.destroy_process_group()
"""


def test_a_users_code_is_baked_pushed_by_digest_and_named_so_by_the_k8s_job(images, registry, lab, tmp_path):
    code = tmp_path / "mycode"
    (code / "src").mkdir(parents=True)
    (code / "src" / "train.py").write_text(DDP_SCRIPT)
    tag = f"{registry}/team/train:1"
    out = lab("image", "build", str(code), "--script", str(code / "src" / "train.py"), "--tag", tag, "--push")
    assert out.returncode == 0, out.stdout + out.stderr
    ref = re.search(rf"pushed as ({re.escape(registry)}/team/train@sha256:[0-9a-f]{{64}})$", out.stdout, re.M)[1]

    ask = urllib.request.Request(
        f"http://{registry}/v2/team/train/manifests/1", method="HEAD", headers={"Accept": MANIFESTS}
    )
    with urllib.request.urlopen(ask, timeout=10) as answer:
        assert ref.endswith(answer.headers["Docker-Content-Digest"])
    # The baked script runs under torchrun in the image, as the lab's user, with the lab's torch.
    ran = subprocess.run(
        ["docker", "run", "--rm", ref, "torchrun", "--nproc-per-node=2", "/opt/user/mycode/src/train.py"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert sorted(re.findall(r"rank \d of 2 in /opt/user/mycode/src: sum 3", ran.stdout)) == [
        "rank 0 of 2 in /opt/user/mycode/src: sum 3",
        "rank 1 of 2 in /opt/user/mycode/src: sum 3",
    ]
    # The printed command renders a Job that names the image by digest and runs that script.
    command = re.search(r"^run it: lab (run .*)$", out.stdout, re.M)[1].split()
    dry = lab(command[0], "--dry-run", *command[1:])
    assert dry.returncode == 0, dry.stderr
    objects = [o for o in yaml.safe_load_all(dry.stdout) if o]
    job = next(o for o in objects if o["kind"] == "Job")
    config = next(o for o in objects if o["kind"] == "ConfigMap")["data"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == ref
    assert config["LAB_WORKLOAD"] == "/opt/user/mycode/src/train.py"
    # Once the registry no longer holds that digest, a Job naming it is refused before any cluster is asked.
    digest = ref.split("@")[1]
    gone = urllib.request.Request(f"http://{registry}/v2/team/train/manifests/{digest}", method="DELETE")
    with urllib.request.urlopen(gone, timeout=10) as answer:
        assert answer.status == 202
    refused = lab(*command)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "holds no manifest with that digest" in refused.stderr and not lab.run_dir.exists()


def test_a_script_on_this_machine_is_baked_without_its_secrets_or_history_and_run_by_digest(
    images, registry, lab, tmp_path
):
    """`lab run --runtime k8s --registry REG ./train.py` (lab.runtimes.k8s_bake). With no cluster
    here, the command is refused at the cluster check, before anything is built; the bake it then
    does is run as it runs it, against the real registry: its image by digest, the script's path
    in it, the folder's .env and .git left out, no path of this machine's in the Job."""
    code = tmp_path / "mycode"
    (code / ".git").mkdir(parents=True)
    (code / ".git" / "config").write_text("[remote]\n")
    (code / ".env").write_text("TOKEN=secret\n")
    (code / "train.py").write_text(DDP_SCRIPT)
    argv = ("run", "--runtime", "k8s", "--registry", registry, "--nodes", "2", "--nproc-per-node", "1")
    refused = lab(*argv, str(code / "train.py"))
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    built = subprocess.run(["docker", "images", "-q", f"{registry}/torchrun-lab-user-mycode"], capture_output=True)
    assert built.stdout.strip() == b"", "nothing is built before a cluster answers"

    said: list[str] = []
    runtime = KubernetesRuntime(RunDir(tmp_path / "run"), registry=registry, log=said.append)
    assert runtime.locate_script(str(code / "train.py")) == "/opt/user/mycode/train.py"
    assert runtime.bake is not None
    runtime.baked = runtime.bake.run(said.append)
    assert re.fullmatch(rf"{re.escape(registry)}/torchrun-lab-user-mycode@sha256:[0-9a-f]{{64}}", runtime.baked)
    assert any(".env (may hold secrets)" in line and ".git/ (version control)" in line for line in said), said
    manifests = runtime.plan(Topology(nodes=2, nproc_per_node=1), "/opt/user/mycode/train.py", []).text()
    job = next(o for o in yaml.safe_load_all(manifests) if o and o["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == runtime.baked
    assert str(tmp_path) not in manifests
    listed = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "ls", runtime.baked, "-a", "/opt/user/mycode"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0 and sorted(listed.stdout.split()) == [".", "..", "train.py"], listed


def test_a_push_to_a_registry_that_does_not_answer_is_one_line_in_seconds(images, lab, tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(DDP_SCRIPT)
    tag = f"127.0.0.1:{free_port()}/train:1"
    out = lab(
        "image",
        "build",
        str(tmp_path / "code"),
        "--script",
        str(tmp_path / "code" / "train.py"),
        "--tag",
        tag,
        "--push",
    )
    try:
        assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert f"registry {tag.split('/')[0]} does not answer" in out.stderr
    finally:
        subprocess.run(["docker", "rmi", tag], capture_output=True, timeout=60)
