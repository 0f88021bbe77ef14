"""The Ray runtime on a real two-machine Ray cluster: two netns hosts on this machine, each
with its own address and hostname, `ray start --head` in one and `ray start --address` in
the other. The lab's driver runs on the head machine, as a user on a cluster would run it."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, needs_netns, report_of
from test_multinode import ranks_from

from lab import procs
from lab.runtimes import netns

# One cluster (a module fixture on fixed ports): its tests run in one worker of the system tier.
pytestmark = [pytest.mark.slow, needs_netns, pytest.mark.xdist_group("ray-cluster")]
RAY = str(Path(sys.executable).with_name("ray"))
GCS_PORT = 6379
CLUSTER_MARK = "TLAB_TEST_RAY_CLUSTER"  # every process of the test's cluster carries it
# A secured cluster, as Ray now makes them: one token, given to every machine and driver.
RAY_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
# The cluster's machines: netns hosts of a test-only lab id (the labs under test get their own).
NET = netns.for_lab("ee0a1") if netns.unavailable_reason() is None else None


def ray_start(host: netns.Host, index: int, head: netns.Host) -> subprocess.Popen:
    role = (
        ["--head", f"--port={GCS_PORT}", "--include-dashboard=false"]
        if index == 0
        else [f"--address={head.address}:{GCS_PORT}"]
    )
    argv = [
        *netns.exec_prefix(host),
        sys.executable,
        "-m",
        "lab.node.nodeproc",
        f"--hostname={host.name}",
        f"--exit-file=/tmp/tlab-rayc-{index}.exit",
        "--",
        RAY,
        "start",
        "--block",
        *role,
        f"--node-ip-address={host.address}",
        "--num-cpus=2",
        "--object-store-memory=100000000",
        f"--temp-dir=/tmp/tlab-rayc-{index}",
        "--disable-usage-stats",
    ]
    return subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **RAY_ENV, CLUSTER_MARK: "1"},
    )


def on_head(*lab_args: str, run_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The lab CLI on the head machine (its network namespace and hostname)."""
    argv = [*netns.exec_prefix(NET.host(0)), sys.executable, "-m", "lab", *lab_args]
    return subprocess.run(
        argv,
        env={**os.environ, **RAY_ENV, "LAB_RUN_DIR": str(run_dir)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cluster_pids() -> list[int]:
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and procs.environ(int(p.name)).get(CLUSTER_MARK) == "1"
    ]


@pytest.fixture(scope="module")
def ray_cluster():
    hosts = NET.create(2)
    try:
        for i, host in enumerate(hosts):
            ray_start(host, i, hosts[0])
            address = f"{hosts[0].address}:{GCS_PORT}"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                status = subprocess.run(
                    [*netns.exec_prefix(hosts[0]), RAY, "status", f"--address={address}"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    env={**os.environ, **RAY_ENV},
                )
                if status.stdout.count("node_") >= i + 1 and "Active:" in status.stdout:
                    break
                time.sleep(1)
            else:
                pytest.fail(f"machine {i} never joined the Ray cluster: {status.stdout[-800:]} {status.stderr[-800:]}")
        yield address
    finally:
        for pid in cluster_pids():  # the test's own cluster (procs.terminate signals only the lab's marked ones)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        procs.wait_gone(cluster_pids(), 10)
        NET.destroy()
        for i in range(2):
            shutil.rmtree(f"/tmp/tlab-rayc-{i}", ignore_errors=True)
            Path(f"/tmp/tlab-rayc-{i}.exit").unlink(missing_ok=True)


@pytest.fixture
def run_dir(tmp_path):
    path = tmp_path / "run"
    try:
        yield path
    finally:
        # Only a recorded lab: with no state `lab down` is the local runtime's, which would take
        # the lab's netns hosts, and with them this test's Ray machines, down.
        if (path / "state.json").exists():
            on_head("down", run_dir=path, timeout=120)


def test_two_machine_job_gives_the_local_checksums(ray_cluster, run_dir):
    up = on_head("up", "--runtime", "ray", "--ray-address", ray_cluster, "--prometheus", "off", run_dir=run_dir)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-2000:]
    ranks = ranks_from(up.stdout)
    assert [r.rank for r in ranks] == [0, 1, 2, 3]
    assert {r.checksum for r in ranks} == {"-4.676729"}  # the local runtime's figure (test_multinode)
    assert {(r.node, r.host) for r in ranks} == {("node0", "node0"), ("node1", "node1")}, (
        "node i on the i-th machine by address"
    )
    status = on_head("status", run_dir=run_dir)
    assert "runtime ray" in status.stdout and status.stdout.count("exited 0") == 2, status.stdout


@pytest.mark.parametrize("name", ["kill-worker", "kill-node"])
def test_fault_drill_passes_on_the_ray_cluster(ray_cluster, run_dir, name):
    out = on_head(
        "exercise", "run", name, "--runtime", "ray", "--ray-address", ray_cluster, run_dir=run_dir, timeout=600
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["runtime"] == "ray" and report["verdict"] == "pass", report
    # --recovery auto: the lab's rendezvous across machines for a worker, torch's for a node
    assert report["recovery_style"]["style"] == {"kill-worker": "restart", "kill-node": "torchrun"}[name]


def test_a_drill_on_a_users_script_on_the_ray_cluster(ray_cluster, run_dir):
    script = REPO / "tests" / "user_scripts" / "snapshot_every_epoch.py"
    out = on_head(
        "exercise", "run", "kill-worker", "--runtime", "ray", "--ray-address", ray_cluster, "--script", str(script),
        "--compare", "result.pt", "--", "--epochs", "8",
        run_dir=run_dir, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["runtime"] == "ray" and report["verdict"] == "pass", report
    assert report["compared"].startswith("bitwise equal") and report["loaded_after_fault"] == ["snapshot.pt"]


def test_more_nodes_than_machines_names_both_numbers(ray_cluster, run_dir):
    out = on_head("up", "--runtime", "ray", "--ray-address", ray_cluster, "--nodes", "3", run_dir=run_dir)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"lab up: error: the Ray cluster at {ray_cluster} has 2 machine(s); --nodes 3 needs 3 "
        "(one lab node per machine)"
    ]


def test_prometheus_scrapes_every_machine_and_down_leaves_no_lab_actor(ray_cluster, run_dir):
    up = on_head(
        "up",
        "--runtime",
        "ray",
        "--ray-address",
        ray_cluster,
        "--prometheus",
        "on",
        "--detach",
        "--workload",
        "trainer",
        "--",
        "--steps",
        "300",
        "--step-time",
        "0.1",
        run_dir=run_dir,
    )
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # Prometheus beside the driver, exporters on both machines
        status = on_head("status", run_dir=run_dir)
        if "agent node0: up" in status.stdout and "agent node1: up" in status.stdout:
            break
        time.sleep(2)
    assert "agent node0: up" in status.stdout and "agent node1: up" in status.stdout, status.stdout
    down = on_head("down", run_dir=run_dir)
    assert re.search(r"removed actor tlab-[0-9a-f]{5}-node0 ", down.stdout), down.stdout
    assert re.search(r"removed actor tlab-[0-9a-f]{5}-node1 ", down.stdout), down.stdout
    actors = subprocess.run(
        [
            *netns.exec_prefix(NET.host(0)),
            RAY,
            "list",
            "actors",
            f"--address={ray_cluster}",
            "--filter",
            "state=ALIVE",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **RAY_ENV},
    )
    assert "MachineAgent" not in actors.stdout, actors.stdout
    assert not [p for p in procs.marked_pids(str(run_dir))], "a node's process outlived lab down"
