"""`lab doctor` on real hosts: netns hosts (each its own network namespace, hostname, hosts file
and firewall) and loopback ones. Healthy, it finds nothing and says so; each misconfiguration
planted on a node once its hosts are up (lab.doctor.examine's seed) is named in one line about
that node, and nothing is left behind either way."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from conftest import left_behind, loopback_labs, needs_netns

from lab import runtimes
from lab.bench import free_port
from lab.doctor.examine import examine
from lab.rundir import RunDir
from lab.topology import Topology

pytestmark = pytest.mark.slow


def netns_runtime(tmp_path: Path):
    return runtimes.create("local", RunDir(tmp_path / "run"), log=lambda line: None, hosts="netns", monitoring="off")


def run_examine(tmp_path: Path, seed=None, nodes: int = 2):
    runtime = netns_runtime(tmp_path)
    exam = examine(runtime, Topology(nodes=nodes, agent_metrics_port=0, rank_metrics_port=0), lambda _: None, seed)
    assert left_behind(runtime.run_dir.path, runtime.run_dir.lab_id) == []
    return [f.line() for f in exam.found]


def hosts_file(node) -> Path:
    return Path("/etc/netns") / node.netns / "hosts"


def in_netns(node, *argv: str) -> None:
    subprocess.run(["ip", "netns", "exec", node.netns, *argv], check=True, capture_output=True)


@needs_netns
def test_healthy_netns_hosts_find_nothing_and_the_cli_says_so(lab):
    out = lab("doctor", "--nodes", "3", timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1].startswith("nothing wrong: every node resolves itself")
    assert "probing 3 node(s) (local, netns)" in out.stdout


@needs_netns
@pytest.mark.parametrize("bad", [1, 0, 2])
def test_a_hostname_that_resolves_to_loopback_is_named_on_its_node(tmp_path, bad):
    """The Debian default (127.0.1.1 for the machine's own name): gloo gives the peers that address."""

    def seed(runtime, plan):
        node = plan.nodes[bad]
        hosts_file(node).write_text(f"127.0.1.1 {node.name}\n" + hosts_file(node).read_text())

    (found,) = run_examine(tmp_path, seed, nodes=3)
    assert found.startswith(f"node{bad}: it gives its peers 127.0.1.1 (hostname: loopback)"), found


@needs_netns
def test_a_firewall_that_drops_new_connections_names_who_cannot_reach_whom(tmp_path):
    def seed(runtime, plan):
        in_netns(plan.nodes[1], "iptables", "-A", "INPUT", "-p", "tcp", "--syn", "-j", "DROP")

    found = run_examine(tmp_path, seed)
    assert len(found) == 1 and found[0].startswith("node0: cannot reach node1 at 10.213."), found
    assert "no answer in 2 s" in found[0] and "firewall" in found[0]


@needs_netns
def test_a_silent_dns_server_makes_reverse_lookups_slow(tmp_path):
    """c10d looks up each peer's name: a node whose hosts file lacks its peers asks the DNS server."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a server that never answers

    def seed(runtime, plan):
        gateway = plan.nodes[0].address.rsplit(".", 1)[0] + ".1"
        silent.bind((gateway, 53))
        etc = hosts_file(plan.nodes[0]).parent
        (etc / "hosts").write_text(f"{plan.nodes[0].address} node0\n")
        (etc / "resolv.conf").write_text(f"nameserver {gateway}\noptions timeout:2 attempts:1\n")

    with silent:
        found = run_examine(tmp_path, seed)
    assert len(found) == 1 and found[0].startswith("node0: looking up the name of node1's address 10.213."), found


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
        "lab doctor: error: lab doctor does not probe k8s nodes yet, only local ones: use --runtime local"
    )
    out = lab("doctor", "--recovery", "restart")
    assert out.returncode == 2 and "unrecognized arguments: --recovery restart" in out.stderr
