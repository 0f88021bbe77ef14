"""GPU placement on a machine faked to have N GPUs (LAB_GPU_COUNT; no GPU here): nodes that share
a machine get disjoint devices, the dry run shows them, and too few GPUs is a one-line refusal.
The assignment printed is the one the runtimes pass on (the same function renders both)."""

from __future__ import annotations

import re

import pytest
from test_cli_errors import assert_one_line_error

from lab import gpus
from lab.errors import LabError
from lab.topology import Topology, TopologyError


@pytest.mark.parametrize("nodes, per_node, available", [(2, 2, 4), (3, 1, 3), (2, 4, 8), (1, 8, 8), (4, 2, 9)])
def test_co_located_nodes_get_disjoint_gpus(nodes, per_node, available):
    assigned = gpus.assign(nodes, per_node, available)
    assert [len(d) for d in assigned] == [per_node] * nodes
    flat = [g for d in assigned for g in d]
    assert len(set(flat)) == len(flat) and max(flat) < available


@pytest.mark.parametrize("nodes, per_node, available", [(2, 2, 3), (2, 1, 1), (3, 2, 0)])
def test_too_few_gpus_is_refused(nodes, per_node, available):
    with pytest.raises(LabError, match=f"need {nodes * per_node} GPUs; this machine has {available}"):
        gpus.assign(nodes, per_node, available)


def test_gloo_uses_no_gpus_and_nccl_one_per_worker_by_default():
    assert Topology(backend="gloo").node_gpus == 0
    assert Topology(backend="nccl", nproc_per_node=3).node_gpus == 3
    assert Topology(backend="nccl", nproc_per_node=2, gpus_per_node=4).node_gpus == 4
    with pytest.raises(TopologyError, match="gpus_per_node"):
        Topology(backend="nccl", nproc_per_node=4, gpus_per_node=2)


def test_dry_run_shows_each_nodes_devices_and_passes_them_to_its_launch(lab, monkeypatch):
    monkeypatch.setenv("LAB_GPU_COUNT", "4")
    out = lab("up", "--backend", "nccl", "--nodes", "2", "--nproc-per-node", "2", "--hosts", "loopback", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert re.findall(r"#   gpus (\S+) of this machine's 4", out.stdout) == ["0,1", "2,3"]
    launches = [line for line in out.stdout.splitlines() if " -m lab.node.launch " in line]
    assert [re.search(r"--env=CUDA_VISIBLE_DEVICES=(\S+)", c)[1] for c in launches] == ["0,1", "2,3"]


def test_gloo_dry_run_sets_no_devices(lab, monkeypatch):
    monkeypatch.setenv("LAB_GPU_COUNT", "4")
    out = lab("up", "--hosts", "loopback", "--dry-run")
    assert out.returncode == 0 and "CUDA_VISIBLE_DEVICES" not in out.stdout and "# gpus" not in out.stdout


def test_nccl_on_a_machine_with_too_few_gpus_is_one_line(lab, monkeypatch):
    monkeypatch.setenv("LAB_GPU_COUNT", "1")
    out = lab("up", "--backend", "nccl", "--nodes", "2", "--nproc-per-node", "2", "--hosts", "loopback", "--dry-run")
    assert_one_line_error(out, "need 4 GPUs", "has 1")
    assert not lab.run_dir.exists()


def test_docker_nodes_request_their_own_device_ids(monkeypatch, tmp_path):
    """The container's DeviceRequest (no daemon needed to build it) names the node's GPUs only."""
    from lab.rundir import RunDir
    from lab.runtimes.docker_runtime import DockerRuntime

    monkeypatch.setenv("LAB_GPU_COUNT", "4")
    monkeypatch.setenv("LAB_DOCKER_SUBNET", "172.29.87.0/24")
    gpus.count.cache_clear()
    try:
        _, nodes = DockerRuntime(RunDir(tmp_path / "run")).layout(Topology(backend="nccl", nproc_per_node=2))
    finally:
        gpus.count.cache_clear()
    assert [n.device_requests()[0].device_ids for n in nodes] == [["0", "1"], ["2", "3"]]


def test_the_build_check_is_one_line_and_says_what_cuda_it_finds():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "lab.gpus"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and len(out.stdout.strip().splitlines()) == 1, out
    import torch

    expected = "CPU build, no CUDA" if torch.version.cuda is None else "CUDA"
    assert expected in out.stdout
