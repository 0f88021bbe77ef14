"""`lab doctor` on real hosts: netns hosts (each its own network namespace, hostname, hosts file
and firewall) and loopback ones. Healthy, it finds nothing and says so; each misconfiguration
planted on a node once its hosts are up (lab.doctor.examine's seed) is named in one line about
that node, and nothing is left behind either way."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from contextlib import ExitStack

import pytest
from conftest import REPO, left_behind, loopback_labs, needs_netns

from lab import runtimes
from lab.bench import free_port
from lab.doctor.examine import examine
from lab.rundir import RunDir
from lab.runtimes import netns
from lab.runtimes.misconfig import MISCONFIGS
from lab.topology import Topology

pytestmark = pytest.mark.slow


def planted_cases() -> list:
    """Each misconfiguration on 3 hosts, planted on a node that differs from one to the next (the
    unit tests judge every position on recorded reports)."""
    cases = []
    for position, misconfig in enumerate(MISCONFIGS.values()):
        index = position % 3 if misconfig.on_store or position % 3 else 1
        marks = [loopback_labs] if misconfig.hosts[0] == "loopback" else []
        cases.append(pytest.param(misconfig, index, id=f"{misconfig.name}-on-node{index}", marks=marks))
    return cases


@needs_netns
@pytest.mark.parametrize("nodes", [2, 3])
def test_healthy_netns_hosts_find_nothing_and_the_cli_says_so(lab, nodes):
    out = lab("doctor", "--nodes", str(nodes), timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1].startswith("nothing wrong: every node resolves itself")
    assert f"probing {nodes} node(s) (local, netns)" in out.stdout and "note:" not in out.stdout
    assert not lab.run_dir.exists(), "the doctor tears down what it brought up, and its run dir goes with it"


@pytest.mark.parametrize("misconfig,index", planted_cases())
def test_each_planted_misconfiguration_is_named_on_the_node_at_fault(tmp_path, misconfig, index):
    hosts = misconfig.hosts[0]
    if hosts == "netns" and netns.unavailable_reason():
        pytest.skip(f"netns hosts unavailable: {netns.unavailable_reason()}")
    runtime = runtimes.create("local", RunDir(tmp_path / "run"), log=lambda line: None, hosts=hosts, monitoring="off")
    topology = Topology(nodes=3, rdzv_port=free_port(), agent_metrics_port=0, rank_metrics_port=0)
    with ExitStack() as undo:
        exam = examine(runtime, topology, lambda _: None, lambda _, plan: misconfig.plant(plan, index, undo))
    assert left_behind(runtime.run_dir.path, runtime.run_dir.lab_id) == []
    found = [f.line() for f in exam.found]
    blamed = misconfig.blamed(index, 3)
    assert any(f.node == blamed and misconfig.says in f.line() for f in exam.found), found
    others = [f.line() for f in exam.found if f.node != blamed]
    if misconfig.blames != "peer" and not misconfig.name.startswith("interface-"):  # those reach every node
        assert others == [], f"only {blamed} is at fault: {found}"


@needs_netns
def test_a_missing_interface_named_for_gloo_is_one_line_and_exit_1(lab):
    env = {**lab.env(), "GLOO_SOCKET_IFNAME": "eth9"}  # the nodes' agents inherit the lab's environment
    out = subprocess.run(lab.cmd("doctor"), env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 1, out.stdout + out.stderr
    said = [line for line in out.stdout.splitlines() if line.startswith("node")]
    assert said == [
        f"node{i}: GLOO_SOCKET_IFNAME=eth9 names no interface here (it has eth0, lo): name the interface that "
        "reaches the other nodes, or unset it"
        for i in range(2)
    ]
    assert out.stdout.strip().splitlines()[-1].startswith("2 finding(s)")


@loopback_labs
def test_loopback_hosts_find_nothing_and_a_taken_rendezvous_port_is_named(lab):
    port = free_port()
    out = lab("doctor", "--hosts", "loopback", "--rdzv-port", str(port), timeout=180)
    assert out.returncode == 0 and "nothing wrong" in out.stdout, out.stdout + out.stderr
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the probes' connections linger in TIME_WAIT
        busy.bind(("0.0.0.0", port))
        busy.listen()
        out = lab("doctor", "--hosts", "loopback", "--rdzv-port", str(port), timeout=180)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"the rendezvous port {port} is already in use on this machine: pick another with --rdzv-port" in out.stdout


def test_flags_it_does_not_take_are_refused(lab):
    out = lab("doctor", "--prometheus", "on")
    assert out.returncode == 1 and out.stderr.strip() == (
        "lab doctor: error: lab doctor starts no Prometheus: drop --prometheus (lab up runs it)"
    )
    out = lab("doctor", "--runtime", "k8s")
    assert out.returncode == 1 and out.stderr.strip() == (
        "lab doctor: error: lab doctor does not probe k8s nodes yet, only docker, local, ray ones: use --runtime "
        "docker or local or ray"
    )
    out = lab("doctor", "--recovery", "restart")
    assert out.returncode == 2 and "unrecognized arguments: --recovery restart" in out.stderr


@needs_netns
def test_a_job_whose_nodes_cannot_connect_gets_the_doctors_finding_in_its_card(lab):
    """GLOO_SOCKET_IFNAME=lo, as a user might export it: the lesson's job fails in gloo's
    connectFullMesh; lab up runs the doctor on hosts like the job's and the card (and `lab why`
    after it) says what it found."""
    env = {**lab.env(), "GLOO_SOCKET_IFNAME": "lo"}
    up = lab.cmd("up", "--prometheus", "off", "--max-restarts", "0")
    out = subprocess.run(up, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    said = (
        "note: lab doctor, run on hosts like the job's after it failed to connect: node0: it gives its peers 127.0.0.1"
    )
    assert said in out.stdout and "set GLOO_SOCKET_IFNAME to the interface that reaches" in out.stdout, out.stdout
    assert said in lab("why").stdout
    lab("down")
    assert not (lab.run_dir / "doctor.json").exists()


@needs_netns
def test_the_bench_plants_a_misconfiguration_under_the_job_and_under_the_doctor(tmp_path):
    """lab bench doctor, one row: the job meets the missing interface and fails at once (gloo finds
    no such device); the doctor names it."""
    out = subprocess.run(
        [sys.executable, "-m", "lab", "bench", "doctor", "--misconfigs", "interface-missing", "--bound", "60",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    row = json.loads((tmp_path / "doctor.json").read_text())["figures"]["rows"]["interface-missing"]
    assert row["job"] == "failed" and "eth9" in row["error"], row
    assert row["named"] and row["finding"].startswith("node1: GLOO_SOCKET_IFNAME=eth9 names no interface"), row


@needs_netns
def test_a_misconfiguration_drill_shows_the_job_failing_then_the_doctor_naming_it(lab):
    """docs/doctor.md's drill: the missing interface planted, the lesson's job fails on it (gloo
    finds no eth9), the doctor names it on the node it is about; nothing is left behind."""
    out = lab("exercise", "run", "interface-missing")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "[ok] the job does not train: it fails or hangs: failed after" in out.stdout
    assert "Unable to find address for: eth9" in out.stdout
    assert "[ok] lab doctor names it on node1, in one line: node1: GLOO_SOCKET_IFNAME=eth9 names no" in out.stdout
    assert "verdict: PASS" in out.stdout
    assert left_behind(lab.run_dir, lab.lab_id) == []
