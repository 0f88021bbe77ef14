"""`lab bench coordinators` end to end on the local runtime: node 0's agent (host of the c10d and
of the lab's rendezvous store), the lab's etcd and its Prometheus SIGKILLed under real 2 x 2
trainer jobs, each verdict reached well inside twice its timeout, and nothing left behind."""

from __future__ import annotations

import json

import pytest
from conftest import bench_leaves_nothing, loopback_labs
from test_cli_errors import assert_one_line_error

pytestmark = [pytest.mark.slow, loopback_labs]  # loopback hosts: torchrun's port on this machine


def test_each_coordinator_loss_is_survived_or_fails_fast_saying_why(lab, tmp_path):
    with bench_leaves_nothing("coordinators"):
        out = lab(
            "bench", "coordinators", "--coordinators", "c10d,lab-store,etcd,prometheus", "--trials", "1",
            "--out", str(tmp_path), timeout=600,
        )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    cells = {c["coordinator"]: c for c in json.loads((tmp_path / "coordinators.json").read_text())["figures"]["cells"]}
    for store in ("c10d", "lab-store"):  # the store dies with node 0's agent: node 1 cannot regroup
        cell = cells[store]
        assert cell["verdict"] == "failed fast", cell  # within twice its timeout: the verdict's own bound
        assert "killed: node0 (SIGKILL)" in cell["said"] and "could not regroup without it" in cell["said"], cell
        assert cell["exit_codes"]["node0"] == 137 and cell["exit_codes"]["node1"] != 0, cell
    etcd = cells["etcd"]  # outside every node: the agents go on (lab.node.store_loss) and the job ends well
    assert etcd["verdict"] == "survived" and "they went on training without it" in etcd["said"], etcd
    assert cells["prometheus"]["verdict"] == "survived", cells["prometheus"]
    assert "Goal: 0 hangs beyond twice the configured timeout: **met**" in out.stdout


def test_bad_input_is_one_line(lab):
    for args, words in (
        (["--coordinators", "zookeeper"], "--coordinators: choose from c10d, lab-store, etcd, prometheus, ray-head"),
        (["--trials", "0"], "--trials: at least 1"),
        (["--side-by-side", "0"], "--side-by-side: at least 1 cell at a time"),
        (["--hosts", "userns"], "--hosts: the coordinators bench runs on loopback or netns"),
        (["--runtimes", "k8s"], "--runtimes: choose from local, docker, ray"),
        (["--coordinators", "etcd", "--runtimes", "docker"], "--coordinators etcd: measured on the local runtime"),
    ):
        assert_one_line_error(lab("bench", "coordinators", *args, "--out", "/tmp/unused-bench-out"), words)


@pytest.mark.docker
def test_a_store_killed_in_its_container_fails_fast_saying_why(lab, images, tmp_path):
    """Node 0's agent SIGKILLed inside its container (docker exec): its shim gives the orphaned
    workers 5 s, then node 1's group fails and finds no store to regroup in."""
    out = lab(
        "bench", "coordinators", "--runtimes", "docker", "--coordinators", "lab-store", "--trials", "1",
        "--out", str(tmp_path), timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    [cell] = json.loads((tmp_path / "coordinators.json").read_text())["figures"]["cells"]
    # Fast by the verdict's own bound (the job ended within twice its join timeout): no line of ours.
    assert (cell["runtime"], cell["verdict"]) == ("docker", "failed fast"), cell
    assert cell["exit_codes"]["node0"] == 137 and cell["exit_codes"]["node1"] not in (0, None), cell
    assert "the lab's rendezvous store at node0:" in cell["said"] and "killed: node0 (SIGKILL)" in cell["said"], cell
