"""The Docker runtime with a real daemon and the real cpu image (built here, offline).

The session's first test builds the images with scripts/build-images.sh, as CI does: with
no registry it makes the base from debootstrap and installs wheels from docker/wheels.
Skip these locally with `-m "not docker"`; CI runs them (no daemon there is a failure).
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
import signal
import time

import pytest
from conftest import REPO, Lab, loopback_labs, report_of, wait_for_output
from doc_commands import commands
from docker_support import docker, labelled
from test_chaos import ledger_of
from test_multinode import ranks_from

from lab.bench import free_port
from lab.health.prometheus import Prometheus
from lab.runtimes.docker_engine import NODE_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def docker_lab(lab, images):
    """The lab fixture, checked afterwards: `lab down` left no container or network of its run dir."""
    yield lab
    lab("down", timeout=120)
    assert labelled(lab.run_dir) == [] and labelled(lab.run_dir, "network") == []


@loopback_labs
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
    # No IPv6 in a node (the store listens on both families; every fence is IPv4): the daemon
    # applied the sysctls, and gave the container no IPv6 address, link-local or global.
    sysctls = json.loads(docker("inspect", "-f", "{{json .HostConfig.Sysctls}}", node0).stdout)
    assert sysctls.get("net.ipv6.conf.all.disable_ipv6") == "1", sysctls
    probe = docker(
        "run", "--rm", "--sysctl", "net.ipv6.conf.all.disable_ipv6=1", NODE_IMAGE, "cat", "/proc/net/if_inet6"
    )
    assert probe.returncode == 0 and probe.stdout.strip() == "", probe.stdout


def test_the_node_image_says_in_one_line_what_cuda_it_has(images):
    """The cpu image's torch imports and reports itself; a cuda image on this CPU machine would
    say CUDA is unavailable through the same line (lab.gpus.describe)."""
    out = docker("run", "--rm", "--read-only", "--cap-drop", "ALL", NODE_IMAGE, "python", "-m", "lab.gpus")
    assert out.returncode == 0 and len(out.stdout.strip().splitlines()) == 1, out.stdout + out.stderr
    assert "a CPU build, no CUDA" in out.stdout


@pytest.mark.parametrize(
    ("name", "recovery", "style"),
    [
        # --recovery auto: a keeper per container for a worker (the spare takes the rank's place,
        # state from a peer), torch's rendezvous for a node
        ("kill-worker", "auto", "in-process"),
        ("kill-node", "auto", "torchrun"),
        # the tuned restart: the lab's rendezvous across containers
        ("kill-worker", "restart", "restart"),
        # a save paused midway in a container (SIGRTMIN+8 through `docker exec`), killed inside: a
        # DCP step of the sharded trainer, every container writing its shards into one folder
        ("kill-in-save", "auto", "restart"),
    ],
)
def test_fault_drill_passes_in_containers(docker_lab, name, recovery, style):
    extra = ["--parallel", "fsdp2", "--target-rank", "1"] if name == "kill-in-save" else []
    out = docker_lab("exercise", "run", name, "--runtime", "docker", "--recovery", recovery, *extra, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["runtime"] == "docker" and report["verdict"] == "pass", report
    assert report["recovery_style"]["style"] == style


def test_a_drill_on_a_users_script_in_containers(docker_lab):
    """The user's folder is mounted read-only; the script runs in a working dir of the run dir."""
    script = REPO / "tests" / "user_scripts" / "snapshot_every_epoch.py"
    out = docker_lab(
        "exercise", "run", "kill-worker", "--runtime", "docker", "--script", str(script), "--", "--epochs", "8",
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["runtime"] == "docker" and report["verdict"] == "pass", report
    assert report["loaded_after_fault"] == ["snapshot.pt"] and report["work_redone"]["unit"] == "epoch"


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


@pytest.mark.parametrize("flags", [["--backend", "nccl"], ["--gpus-per-node", "1"]], ids=["nccl", "gpus"])
def test_gpus_asked_of_the_cpu_image_are_refused_in_one_line(docker_lab, flags):
    """The image's label says its torch is a CPU build: refused before any GPU count or container."""
    out = docker_lab("up", "--runtime", "docker", "--prometheus", "off", *flags)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert f"image {NODE_IMAGE} has torch's CPU build" in out.stderr and "TARGETS=cuda" in out.stderr
    assert labelled(docker_lab.run_dir) == []


def test_the_docs_campaign_in_containers_survives_each_node_lost_beside_a_busy_process(docker_lab):
    """docs/chaos.md's docker campaign: node 1 preempted, node 0 lost (it holds the job's store:
    the campaign starts the job again whole), two ranks killed inside one regroup, node 1 lost
    and started again; each judged from the job's own events, beside a busy process."""
    shown = next(c.text for c in commands("docs/chaos.md") if "--runtime docker" in c.text)
    out = docker_lab(*shlex.split(shown)[1:], timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    record = ledger_of(out.stdout)
    struck = [(f["kind"], min(f["ranks"])) for f in record["faults"]]
    assert ("kill-node", 0) in struck and ("kill-node", 2) in struck and "kill-in-regroup" in dict(struck)
    assert record["stuck"] == 0 and record["load"] == 1 and record["final_weights"]["identical"] is True


def test_the_docs_script_campaign_in_containers_resumes_plain_train_each_time(docker_lab):
    """docs/chaos.md's script campaign on the docker runtime: plain_train unmodified in the
    containers, a node lost with the store, cut off, lost whole; its result against a fault-free run."""
    shown = next(c.text for c in commands("docs/chaos.md") if "--runtime docker --script" in c.text)
    out = docker_lab(*shlex.split(shown)[1:], timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    record = ledger_of(out.stdout)
    assert record["faults_injected"] == 4 and record["stuck"] == 0 and record["recovery_style"] != "in-process"
    assert {"lose-store", "partition-node", "kill-node"} <= {f["kind"] for f in record["faults"]}, record["faults"]
    assert record["final_weights"]["identical"] is True and record["final_weights"]["compared"] == "result.txt"
    assert record["steps_redone"] > 0


def test_the_doctor_probes_containers_and_finds_nothing(docker_lab):
    """lab doctor on the docker runtime: a probe per container in place of the job, sharing the run
    dir's work folder, every container and the network gone after (the fixture checks)."""
    out = docker_lab("doctor", "--runtime", "docker", "--nodes", "3", timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "probing 3 node(s) (docker, containers)" in out.stdout and "note:" not in out.stdout, out.stdout
    assert out.stdout.strip().splitlines()[-1].startswith("nothing wrong: every node resolves itself")
