"""The Ray runtime on a real two-machine Ray cluster (lab.bench.ray_cluster): two netns hosts on
this machine, each with its own address and hostname, `ray start --head` in one and
`ray start --address` in the other. The lab's driver runs on the head machine, as a user on a
cluster would run it."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time

import pytest
from conftest import REPO, needs_netns, report_of
from test_multinode import ranks_from

from lab import procs
from lab.bench import ray_head_cell
from lab.bench.coordinator_cell import COORDINATORS, Cell
from lab.bench.ray_cluster import RAY, ray_cluster
from lab.runtimes import netns

# One cluster (a module fixture on fixed ports): its tests run in one worker of the system tier.
pytestmark = [pytest.mark.slow, needs_netns, pytest.mark.xdist_group("ray-cluster")]


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster("ee0a1") as started:  # a test-only lab id: the labs under test get their own
        yield started


@pytest.fixture
def run_dir(tmp_path, cluster):
    path = tmp_path / "run"
    try:
        yield path
    finally:
        # Only a recorded lab: with no state `lab down` is the local runtime's, which would take
        # the lab's netns hosts, and with them this test's Ray machines, down.
        if (path / "state.json").exists():
            cluster.on_head("down", run_dir=path, timeout=120)


def test_two_machine_job_gives_the_local_checksums(cluster, run_dir):
    up = cluster.on_head(
        "up", "--runtime", "ray", "--ray-address", cluster.address, "--prometheus", "off", run_dir=run_dir
    )
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-2000:]
    ranks = ranks_from(up.stdout)
    assert [r.rank for r in ranks] == [0, 1, 2, 3]
    assert {r.checksum for r in ranks} == {"-4.676729"}  # the local runtime's figure (test_multinode)
    assert {(r.node, r.host) for r in ranks} == {("node0", "node0"), ("node1", "node1")}, (
        "node i on the i-th machine by address"
    )
    status = cluster.on_head("status", run_dir=run_dir)
    assert "runtime ray" in status.stdout and status.stdout.count("exited 0") == 2, status.stdout


@pytest.mark.parametrize("name", ["kill-worker", "kill-node"])
def test_fault_drill_passes_on_the_ray_cluster(cluster, run_dir, name):
    out = cluster.on_head(
        "exercise", "run", name, "--runtime", "ray", "--ray-address", cluster.address, run_dir=run_dir, timeout=600
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["runtime"] == "ray" and report["verdict"] == "pass", report
    # --recovery auto: the lab's rendezvous across machines for a worker, torch's for a node
    assert report["recovery_style"]["style"] == {"kill-worker": "restart", "kill-node": "torchrun"}[name]


def test_a_drill_on_a_users_script_on_the_ray_cluster(cluster, run_dir):
    script = REPO / "tests" / "user_scripts" / "snapshot_every_epoch.py"
    out = cluster.on_head(
        "exercise", "run", "kill-worker", "--runtime", "ray", "--ray-address", cluster.address, "--script", str(script),
        "--compare", "result.pt", "--", "--epochs", "8",
        run_dir=run_dir, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["runtime"] == "ray" and report["verdict"] == "pass", report
    assert report["compared"].startswith("bitwise equal") and report["loaded_after_fault"] == ["snapshot.pt"]


def test_the_doctor_probes_every_machine_and_names_a_hostname_on_loopback_on_the_second(cluster, run_dir):
    """`lab doctor --runtime ray`: a probe on each machine through its agent, the reports meeting in
    the run dir every machine shares. Healthy, then with machine 1's hostname on 127.0.1.1 (its
    hosts file, which its Ray processes read): named on node1, a note as on netns hosts."""
    doctor = ("doctor", "--runtime", "ray", "--ray-address", cluster.address)
    healthy = cluster.on_head(*doctor, run_dir=run_dir)
    assert healthy.returncode == 0 and "nothing wrong" in healthy.stdout, healthy.stdout + healthy.stderr
    second = cluster.hosts[1]
    hosts = netns.NETNS_ETC / second.netns / "hosts"
    before = hosts.read_text()
    hosts.write_text(f"127.0.1.1 {second.name}\n{before}")
    try:
        planted = cluster.on_head(*doctor, run_dir=run_dir)
    finally:
        hosts.write_text(before)
    assert planted.returncode == 0, planted.stdout + planted.stderr
    named = f"note: node1: its hostname {second.name} resolves to 127.0.1.1 (loopback) first"
    assert named in planted.stdout, planted.stdout
    assert cluster.on_head("status", run_dir=run_dir).returncode == 3  # its actors gone with it


def test_more_nodes_than_machines_names_both_numbers(cluster, run_dir):
    out = cluster.on_head("up", "--runtime", "ray", "--ray-address", cluster.address, "--nodes", "3", run_dir=run_dir)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"lab up: error: the Ray cluster at {cluster.address} has 2 machine(s); --nodes 3 needs 3 "
        "(one lab node per machine)"
    ]


def test_prometheus_scrapes_every_machine_and_down_leaves_no_lab_actor(cluster, run_dir):
    up = cluster.on_head(
        "up",
        "--runtime",
        "ray",
        "--ray-address",
        cluster.address,
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
        status = cluster.on_head("status", run_dir=run_dir)
        if "agent node0: up" in status.stdout and "agent node1: up" in status.stdout:
            break
        time.sleep(2)
    assert "agent node0: up" in status.stdout and "agent node1: up" in status.stdout, status.stdout
    down = cluster.on_head("down", run_dir=run_dir)
    assert re.search(r"removed actor tlab-[0-9a-f]{5}-node0 ", down.stdout), down.stdout
    assert re.search(r"removed actor tlab-[0-9a-f]{5}-node1 ", down.stdout), down.stdout
    actors = subprocess.run(
        [
            *netns.exec_prefix(cluster.hosts[0]),
            RAY,
            "list",
            "actors",
            f"--address={cluster.address}",
            "--filter",
            "state=ALIVE",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **cluster.env},
    )
    assert "MachineAgent" not in actors.stdout, actors.stdout
    assert not [p for p in procs.marked_pids(str(run_dir))], "a node's process outlived lab down"


def test_losing_the_ray_head_mid_run_the_job_trains_on_and_the_lab_says_it_cannot_reach_ray(cluster, tmp_path):
    """The last test of the module: it kills the cluster's head (lab.bench.ray_head_cell).
    Once started, the nodes need Ray for nothing; the lab needs it to reach them."""
    cell = Cell(COORDINATORS["ray-head"], "ray", 0)
    outcome = ray_head_cell.on_cluster(cell, cluster, tmp_path, threading.Event())
    assert outcome.verdict == "survived", f"{outcome.verdict}: {outcome.said}; exits {outcome.exit_codes}"
    said = f"`lab status`: the nodes cannot be asked: no Ray cluster answers at {cluster.address}"
    assert said in outcome.said, outcome
    assert outcome.left == [], "lab down left these with the head gone"
