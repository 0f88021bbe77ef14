"""The images for real: Debian's Prometheus, docker/compose.yaml, the ray image on a two-container
Ray cluster, and (opt-in) the cuda image. Built as CI builds them (see test_docker.py)."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from conftest import REPO
from docker_support import build_images, compose_command, docker
from test_multinode import ranks_from

from lab.bench import free_port
from lab.runtimes.docker_engine import PROMETHEUS_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_images_built_from_unchanged_inputs_are_not_built_again(images):
    """The session built them already (the images fixture): the same call finds every input
    unchanged (scripts/build-images.sh's inputs label) and builds nothing."""
    again = build_images("cpu")
    assert "torchrun-lab:cpu is up to date" in again and "torchrun-lab-prometheus:2.42 is up to date" in again
    assert "building torchrun-lab" not in again, again
    label = docker("image", "inspect", "-f", '{{index .Config.Labels "torchrun-lab.inputs"}}', "torchrun-lab:cpu")
    assert re.fullmatch(r"[0-9a-f]{16}", label.stdout.strip()), label.stdout


def test_the_prometheus_image_is_debians_server(images):
    version = docker("run", "--rm", PROMETHEUS_IMAGE, "--version")
    assert version.returncode == 0 and "prometheus, version 2.42" in version.stdout + version.stderr


def test_compose_trains_and_prometheus_scrapes_every_agent_and_rank(images):
    """docker/compose.yaml for real, less Grafana (its image needs a registry, none answers here)."""
    port = free_port()
    compose = [*compose_command(), "-p", "tlabtest-compose", "-f", str(REPO / "docker" / "compose.yaml")]
    env = {
        **os.environ,
        "LAB_WORKLOAD_ARGS": "--steps 60 --ckpt-every 20 --step-time 0.2",
        "LAB_PROMETHEUS_PORT": str(port),
    }
    try:
        up = subprocess.run(
            [*compose, "up", "--no-build", "-d", "node0", "node1", "prometheus"],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert up.returncode == 0, up.stderr[-2000:]
        wait = subprocess.run(
            ["docker", "wait", "tlabtest-compose_node0_1", "tlabtest-compose_node1_1"]
            if "docker-compose" in compose[0]
            else [*compose, "wait", "node0", "node1"],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert wait.stdout.split() == ["0", "0"], wait.stdout + wait.stderr
        logs = subprocess.run(
            [*compose, "logs", "--no-color", "node0", "node1"], env=env, capture_output=True, text=True, timeout=60
        ).stdout
        ranks = set(re.findall(r"rank (\d) local_rank \d host (node\d) checksum (\S+)", logs))
        assert {(r, h) for r, h, _ in ranks} == {("0", "node0"), ("1", "node0"), ("2", "node1"), ("3", "node1")}
        assert len({c for _, _, c in ranks}) == 1, f"ranks disagree: {ranks}"
        query = urllib.parse.urlencode({"query": "max_over_time(up[5m])"})
        for _ in range(20):  # the last scrape may still be on its way
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5) as response:
                seen = {r["metric"]["instance"]: r["value"][1] for r in json.load(response)["data"]["result"]}
            if len(seen) == 6:
                break
            time.sleep(1)
        assert seen == {f"node{n}:{p}": "1" for n in (0, 1) for p in (9400, 9500, 9501)}, seen
    finally:
        subprocess.run([*compose, "down", "-v"], env=env, capture_output=True, timeout=120)
    left = docker("ps", "-a", "--filter", "label=com.docker.compose.project=tlabtest-compose", "-q")
    assert left.stdout.strip() == ""


@pytest.fixture(scope="session")
def ray_image(images):
    build_images("ray")
    return "torchrun-lab:ray"


def until_the_cluster_has(name: str, workers: int, bound_s: float = 300.0) -> subprocess.CompletedProcess:
    """`ray status` once the head and every worker are in the cluster, or at the bound. A worker
    whose `ray start --block` gave up before the head answered (its container exited) is started
    again, as Kubernetes restarts a RayCluster's worker pod: beside a busy CI run, 90 polls of
    `ray status` once saw one node of three."""
    deadline = time.monotonic() + bound_s
    while True:
        status = docker("exec", f"{name}-head", "ray", "status")
        if status.stdout.count(" node_") == workers + 1 or time.monotonic() > deadline:
            return status
        for i in range(1, workers + 1):
            if docker("inspect", "-f", "{{.State.Running}}", f"{name}-{i}").stdout.strip() == "false":
                docker("start", f"{name}-{i}")
        time.sleep(1)


def workers_said(name: str) -> str:
    return "".join(f"\n{name}-{i}: {docker('logs', '--tail', '20', f'{name}-{i}').stderr[-1500:]}" for i in (1, 2))


def test_the_ray_image_runs_the_lab_on_a_two_container_ray_cluster(ray_image):
    """What k8s/ray's RayCluster runs, on Docker: a head and a worker container of the ray
    image sharing the run directory's volume; the lab's driver runs on the head."""
    name, env = (
        "tlabtest-ray",
        [
            "-e",
            "RAY_AUTH_MODE=token",
            "-e",
            f"RAY_AUTH_TOKEN={secrets.token_hex(16)}",
            "-e",
            "LAB_RUN_DIR=/var/lib/torchrun-lab/run",
        ],
    )
    common = ["--network", name, "--shm-size", "256m", "-v", f"{name}:/var/lib/torchrun-lab", *env, "-d"]
    ray_start = ["ray", "start", "--block", "--num-cpus=2", "--object-store-memory=80000000", "--disable-usage-stats"]
    try:
        assert docker("network", "create", name).returncode == 0
        head = docker(
            "run",
            "--name",
            f"{name}-head",
            "--hostname",
            "head",
            *common,
            ray_image,
            *ray_start,
            "--head",
            "--port=6379",
            "--num-cpus=0",
            "--include-dashboard=false",
        )
        assert head.returncode == 0, head.stderr
        for i in (1, 2):
            worker = docker(
                "run",
                "--name",
                f"{name}-{i}",
                "--hostname",
                f"machine{i}",
                *common,
                ray_image,
                *ray_start,
                "--address=head:6379",
            )
            assert worker.returncode == 0, worker.stderr
        status = until_the_cluster_has(name, workers=2)
        assert status.stdout.count(" node_") == 3, status.stdout[-1500:] + status.stderr[-1500:] + workers_said(name)
        up = docker(
            "exec",
            f"{name}-head",
            "python",
            "-m",
            "lab",
            "up",
            "--runtime",
            "ray",
            "--ray-address",
            "auto",
            "--prometheus",
            "off",
            timeout=300,
        )
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-2000:]
        ranks = ranks_from(up.stdout)
        assert {r.checksum for r in ranks} == {"-4.676729"} and len(ranks) == 4
        assert {r.host for r in ranks} == {"machine1", "machine2"}, "one lab node per worker container"
        down = docker("exec", f"{name}-head", "python", "-m", "lab", "down", timeout=120)
        assert re.search(r"removed actor tlab-[0-9a-f]{5}-node0", down.stdout), down.stdout + down.stderr
    finally:
        docker("rm", "-f", f"{name}-head", f"{name}-1", f"{name}-2")
        docker("network", "rm", name)
        docker("volume", "rm", name)


@pytest.mark.skipif(
    not os.environ.get("LAB_BUILD_CUDA_IMAGE"),
    reason="opt-in (make test-cuda-image): about 3 GB of wheels and a 7 GB image, minutes to build",
)
def test_the_cuda_image_builds_and_carries_torchs_cuda_build_and_its_nccl():
    """No GPU here: the image is built and its CUDA libraries load; only the driver is missing."""
    built = subprocess.run(
        ["scripts/build-images.sh"],
        env={**os.environ, "TARGETS": "cuda"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert "built: torchrun-lab:cuda" in built.stdout, built.stdout[-2000:] + built.stderr[-2000:]
    out = docker("run", "--rm", "torchrun-lab:cuda", "python", "-m", "lab.gpus")
    assert out.returncode == 0 and len(out.stdout.strip().splitlines()) == 1, out.stdout + out.stderr
    assert re.match(r"torch 2\.14\.1\+cu13\d \(CUDA 13\.\d build\)", out.stdout), out.stdout
    assert "CUDA is unavailable on this machine" in out.stdout or "GPU(s)" in out.stdout, out.stdout
    nccl = docker("run", "--rm", "torchrun-lab:cuda", "python", "-c", "import torch; print(torch.cuda.nccl.version())")
    assert nccl.returncode == 0 and nccl.stdout.strip() == "(2, 30, 7)", nccl.stdout + nccl.stderr
    labels = docker("image", "inspect", "-f", '{{index .Config.Labels "torchrun-lab.torch"}}', "torchrun-lab:cuda")
    assert labels.stdout.strip() == "cuda"
