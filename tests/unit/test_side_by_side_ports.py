"""Ports two labs on one machine both want, taken for real with listening sockets: a port the
lab chose gives way to the next free one; one the user chose is refused in one line. Found by
running the system tier three tests at a time (a drill's Prometheus port taken by another
lab between choosing it and starting it; the lab's etcd beside a loopback lab's store)."""

from __future__ import annotations

import os
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path

import pytest

from lab.bench import up_on_its_own_port
from lab.errors import LabError
from lab.health.prometheus import first_free_port
from lab.rundir import RunDir
from lab.runtimes.local import LocalRuntime
from lab.runtimes.ports import free_etcd_port
from lab.topology import Topology

# Every port here is below the kernel's range for outgoing connections' source ports
# (/proc/sys/net/ipv4/ip_local_port_range, 32768 up): a port in it can be taken by any
# connection on the machine between a test's pick and its use, as CI once took 33400.


def quiet() -> Topology:
    """A job that listens on no fixed port but its rendezvous, and that on a port free now."""
    return Topology(agent_metrics_port=0, rank_metrics_port=0, rdzv_port=free_etcd_port(30400))


TRAINER = str(Path(__file__).resolve().parents[2] / "lab" / "workloads" / "trainer.py")


@contextmanager
def listening(host: str, port: int):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen()
        yield


def test_etcd_moves_past_a_port_another_lab_listens_on_anywhere():
    port = free_etcd_port(31400)  # a free pair
    assert free_etcd_port(port) == port
    with listening("0.0.0.0", port):  # a loopback lab's store: every address
        moved = free_etcd_port(port)
        assert moved > port and (moved - port) % 2 == 0
    with listening("127.0.0.1", port + 1):  # the peer port above it
        assert free_etcd_port(port) > port


def test_a_prometheus_port_the_lab_chose_is_chosen_again_when_taken_before_the_start(tmp_path):
    runtime = LocalRuntime(RunDir(tmp_path / "run"), hosts="loopback", monitoring="on", log=lambda m: None)
    chosen = runtime.prometheus.port
    with listening("127.0.0.1", chosen):  # another lab, starting at the same moment
        plan = runtime.prepare(quiet(), TRAINER, [])
    assert runtime.prometheus.port > chosen and plan.prometheus.endswith(f":{runtime.prometheus.port}")


def test_a_prometheus_port_the_user_chose_is_refused_in_one_line_when_taken(tmp_path):
    port = first_free_port(31900)
    runtime = LocalRuntime(RunDir(tmp_path / "run"), hosts="loopback", monitoring="on", prometheus_port=port)
    with (
        listening("127.0.0.1", port),
        pytest.raises(LabError, match=f"Prometheus port 127.0.0.1:{port} is already in use"),
    ):
        runtime.prepare(quiet(), TRAINER, [])


@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd-server is not installed (make host-deps)")
def test_a_lab_with_etcd_serves_on_the_next_free_port_and_says_so(tmp_path):
    said: list[str] = []
    runtime = LocalRuntime(RunDir(tmp_path / "run"), hosts="loopback", monitoring="off", log=said.append)
    port = free_etcd_port(32400)
    topology = Topology(rdzv_backend="etcd-v2", rdzv_port=port, agent_metrics_port=0, rank_metrics_port=0)
    with listening("0.0.0.0", port):
        plan = runtime.prepare(topology, TRAINER, [])
    assert plan.topology.rdzv_port > port and f"--rdzv-endpoint=127.0.0.1:{plan.topology.rdzv_port}" in plan.text()
    me = open("/proc/self/comm").read().strip()  # pytest, or python in an xdist worker
    moved = f"port {port} is taken (by {me} pid {os.getpid()}, not a lab): etcd serves on {plan.topology.rdzv_port}"
    assert moved in said, said


class PlanOnly:
    """A runtime whose up is the local runtime's real refusals and plan, with no node started."""

    def __init__(self, runtime: LocalRuntime):
        self.runtime = runtime

    def up(self, topology: Topology, script: str, args: list[str]):
        plan = self.runtime.prepare(topology, script, args)
        return plan.topology, plan.nodes


def test_a_bench_cells_rendezvous_port_taken_before_the_start_is_picked_again(tmp_path):
    runtime = PlanOnly(LocalRuntime(RunDir(tmp_path / "run"), hosts="loopback", monitoring="off"))
    taken = free_etcd_port(30600)
    with listening("0.0.0.0", taken):  # anything else on the machine, between the pick and the check
        topology, _ = up_on_its_own_port(runtime, quiet().replace(rdzv_port=taken), TRAINER, [])
    assert topology.rdzv_port != taken


def test_a_bench_cell_gives_up_on_any_other_refusal(tmp_path):
    runtime = PlanOnly(LocalRuntime(RunDir(tmp_path / "run"), hosts="loopback", monitoring="off"))
    exporter = first_free_port(30900)
    with listening("0.0.0.0", exporter), pytest.raises(LabError, match=f"exporter port 0.0.0.0:{exporter}"):
        up_on_its_own_port(runtime, quiet().replace(agent_metrics_port=exporter), TRAINER, [])
