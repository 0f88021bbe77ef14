"""The Docker runtime with a real daemon and the real cpu image (built here, offline).

The session's first test builds the images with scripts/build-images.sh, as CI does: with
no registry it makes the base from debootstrap and installs wheels from docker/wheels.
Skip these locally with `-m "not docker"`; CI runs them (no daemon there is a failure).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import signal
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from conftest import REPO, Lab, report_of, wait_for_output
from test_multinode import ranks_from

from lab.bench import free_port
from lab.health.prometheus import Prometheus
from lab.runtimes.docker_engine import LABEL, NODE_IMAGE, PROMETHEUS_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def labelled(run_dir, kind: str = "container") -> list[str]:
    """Names of the containers (or networks) labelled with this run dir, stopped ones too."""
    extra = ["-a"] if kind == "container" else []
    out = docker(
        kind,
        "ls",
        *extra,
        "--filter",
        f"label={LABEL}={run_dir.resolve()}",
        "--format",
        "{{.Name}}" if kind == "network" else "{{.Names}}",
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def build_images(targets: str) -> None:
    """`make images` as CI runs it (offline, on a debootstrap base, where no registry answers)."""
    built = subprocess.run(
        ["scripts/build-images.sh"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "TARGETS": targets},
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]


@pytest.fixture(scope="session")
def images():
    if docker("info").returncode != 0:
        pytest.fail(
            "no Docker daemon answers: `make host-deps` starts one (as root); skip these tests with -m 'not docker'"
        )
    build_images("cpu")
    return NODE_IMAGE


@pytest.fixture
def docker_lab(lab, images):
    """The lab fixture, checked afterwards: `lab down` left no container or network of its run dir."""
    yield lab
    lab("down", timeout=120)
    assert labelled(lab.run_dir) == [] and labelled(lab.run_dir, "network") == []


def test_two_containers_give_the_local_runtimes_checksums(docker_lab, tmp_path):
    local = Lab(run_dir=tmp_path / "local")
    try:
        up_local = local("up", "--hosts", "loopback", "--prometheus", "off")
    finally:
        local("down")
    assert up_local.returncode == 0, up_local.stdout[-3000:]
    reference = ranks_from(up_local.stdout)
    assert {r.checksum for r in reference} == {"-4.676729"}

    up = docker_lab("up", "--runtime", "docker")
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-2000:]
    ranks = ranks_from(up.stdout)
    assert [r.rank for r in ranks] == [0, 1, 2, 3]
    assert {r.exact for r in ranks} == {r.exact for r in reference}, (
        "containers must match the local runtime bit for bit"
    )
    assert {(r.node, r.host) for r in ranks} == {("node0", "node0"), ("node1", "node1")}
    lab_id = json.loads((docker_lab.run_dir / ".torchrun-lab").read_text())["lab_id"]
    assert sorted(labelled(docker_lab.run_dir)) == [
        f"tlab-{lab_id}-node0",
        f"tlab-{lab_id}-node1",
        f"tlab-{lab_id}-prometheus",
    ]
    status = docker_lab("status")
    assert "runtime docker" in status.stdout and status.stdout.count("exited 0") == 2, status.stdout


def test_prometheus_in_its_container_scrapes_every_agent_and_rank(docker_lab):
    port = free_port()
    up = docker_lab(
        "up",
        "--runtime",
        "docker",
        "--prometheus",
        "on",
        "--prometheus-port",
        str(port),
        "--workload",
        "trainer",
        "--detach",
        "--",
        "--steps",
        "300",
        "--step-time",
        "0.1",
    )
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-1000:]
    prom = Prometheus(docker_lab.run_dir / "prometheus", port=port)
    deadline, up_now = time.monotonic() + 90, {}
    while time.monotonic() < deadline and len(up_now) < 6:
        up_now = {(r["metric"]["job"], r["metric"]["instance"]) for r in prom.query("up == 1")}
        time.sleep(1)
    jobs = sorted(job for job, _ in up_now)
    assert jobs == ["lab-agents"] * 2 + ["lab-ranks"] * 4, up_now
    net = ipaddress.ip_network(json.loads((docker_lab.run_dir / "state.json").read_text())["subnet"])
    assert {i.split(":")[0] for _, i in up_now} == {str(net[11]), str(net[12])}  # the containers' own addresses
    status = docker_lab("status")
    assert "agent node0: up" in status.stdout and "agent node1: up" in status.stdout, status.stdout


def test_containers_run_as_a_non_root_user(docker_lab):
    up = docker_lab("up", "--runtime", "docker", "--prometheus", "off")
    assert up.returncode == 0, up.stdout[-3000:]
    owners = {p.name: p.stat().st_uid for p in (docker_lab.run_dir / "nodes" / "node0").iterdir()}
    assert owners and 0 not in owners.values(), f"files the node wrote, by owner uid: {owners}"
    node0 = next(name for name in labelled(docker_lab.run_dir) if name.endswith("-node0"))
    user = docker("inspect", "-f", "{{.Config.User}}", node0).stdout.strip()
    assert user and not user.startswith("0"), user
    image_user = docker("run", "--rm", NODE_IMAGE, "id", "-u")
    assert image_user.returncode == 0 and image_user.stdout.strip() != "0", image_user


def test_the_node_image_says_in_one_line_what_cuda_it_has(images):
    """The cpu image's torch imports and reports itself; a cuda image on this CPU machine would
    say CUDA is unavailable through the same line (lab.gpus.describe)."""
    out = docker("run", "--rm", "--read-only", "--cap-drop", "ALL", NODE_IMAGE, "python", "-m", "lab.gpus")
    assert out.returncode == 0 and len(out.stdout.strip().splitlines()) == 1, out.stdout + out.stderr
    assert "a CPU build, no CUDA" in out.stdout


@pytest.mark.parametrize("name", ["kill-worker", "kill-node"])
def test_fault_drill_passes_in_containers(docker_lab, name):
    out = docker_lab("exercise", "run", name, "--runtime", "docker", timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["runtime"] == "docker" and report["verdict"] == "pass", report


def test_interrupted_lab_up_removes_its_containers_and_network(docker_lab):
    proc = docker_lab.popen(
        "up",
        "--runtime",
        "docker",
        "--prometheus",
        "off",
        "--workload",
        "trainer",
        "--",
        "--steps",
        "400",
        "--step-time",
        "0.1",
    )
    try:
        assert wait_for_output(proc, "agent metrics on", 2, 120), "the nodes' agents never started"
        assert len(labelled(docker_lab.run_dir)) == 2
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
    finally:
        proc.kill()
    assert labelled(docker_lab.run_dir) == [] and labelled(docker_lab.run_dir, "network") == []


def test_lab_down_leaves_other_containers_alone(docker_lab):
    bystander = docker("run", "-d", "--name", "tlab-test-bystander", NODE_IMAGE, "sleep", "300")
    assert bystander.returncode == 0, bystander.stderr
    try:
        up = docker_lab("up", "--runtime", "docker", "--prometheus", "off", "--detach")
        assert up.returncode == 0, up.stdout[-2000:]
        down = docker_lab("down", timeout=120)
        assert re.search(r"removed container tlab-[0-9a-f]{5}-node0", down.stdout), down.stdout
        state = docker("inspect", "-f", "{{.State.Running}}", "tlab-test-bystander")
        assert state.stdout.strip() == "true", "lab down touched a container it did not make"
    finally:
        docker("rm", "-f", "tlab-test-bystander")


def test_a_foreign_network_on_the_subnet_is_a_one_line_error_and_stays(docker_lab, monkeypatch):
    """Another network holds the subnet the lab is told to use: one line, and that network stays."""
    assert docker("network", "create", "--subnet", "172.29.250.0/24", "tlabtest-foreign").returncode == 0
    monkeypatch.setenv("LAB_DOCKER_SUBNET", "172.29.250.0/24")
    try:
        out = docker_lab("up", "--runtime", "docker", "--prometheus", "off")
        assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "cannot create the Docker network tlab-" in out.stderr
        assert docker("network", "inspect", "tlabtest-foreign").returncode == 0, (
            "lab must not remove a network it did not make"
        )
    finally:
        docker("network", "rm", "tlabtest-foreign")


def test_a_missing_image_names_the_build_command(docker_lab):
    out = docker_lab("up", "--runtime", "docker", "--image", "torchrun-lab:no-such-tag")
    assert out.returncode != 0
    assert out.stderr.strip().splitlines() == [
        "lab up: error: image torchrun-lab:no-such-tag not found: build it with `make images`"
    ], out.stderr
    assert labelled(docker_lab.run_dir) == []


def test_the_prometheus_image_is_debians_server(images):
    version = docker("run", "--rm", PROMETHEUS_IMAGE, "--version")
    assert version.returncode == 0 and "prometheus, version 2.42" in version.stdout + version.stderr


def compose_command() -> list[str]:
    if docker("compose", "version").returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"]  # Debian's 1.29, which host-deps installs


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
        for _ in range(90):  # until the head and both workers are in the cluster
            status = docker("exec", f"{name}-head", "ray", "status")
            if status.stdout.count(" node_") == 3:
                break
            time.sleep(1)
        assert status.stdout.count(" node_") == 3, status.stdout[-1500:] + status.stderr[-1500:]
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
    reason="opt-in (LAB_BUILD_CUDA_IMAGE=1): downloads several GB; these machines' index lacks "
    "the NCCL wheel torch's CUDA build pins (docs/gpu.md)",
)
def test_the_cuda_image_builds_and_says_cuda_is_unavailable_here():
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
    assert out.returncode == 0 and len(out.stdout.strip().splitlines()) == 1
    assert "CUDA is unavailable on this machine" in out.stdout or "GPU(s)" in out.stdout, out.stdout
