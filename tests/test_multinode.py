"""Real multi-node jobs: netns hosts (own address, hostname, hosts file) against one host."""

import os
import re
import signal

import pytest
from conftest import SCRIPTS, left_behind, loopback_labs, needs_netns, wait_for_output

from lab import procs, results
from lab.runtimes import netns
from lab.workloads import script_path

pytestmark = [pytest.mark.slow, needs_netns]


def ranks_from(output: str) -> list[results.RankResult]:
    found = []
    for line in output.splitlines():
        if line.startswith("[node"):
            node, _, text = line[1:].partition("] ")
            found += results.parse(text, node)
    return sorted(found, key=lambda r: r.rank)


def test_two_netns_nodes_match_one_node_bit_for_bit(lab):
    one_node = lab("run", "--nodes", "1", "--nproc-per-node", "4", script_path("ddp_train"))
    assert one_node.returncode == 0, one_node.stdout[-3000:]
    reference = ranks_from(one_node.stdout)
    assert len(reference) == 4 and {r.checksum for r in reference} == {"-4.676729"}

    up = lab("up", "--nodes", "2", "--nproc-per-node", "2")
    assert up.returncode == 0, up.stdout[-3000:]
    assert "all 4 ranks hold the same weights" in up.stdout
    two_nodes = ranks_from(up.stdout)
    assert [r.rank for r in two_nodes] == [0, 1, 2, 3]
    assert {r.exact for r in two_nodes} == {reference[0].exact}, "2x2 must equal 1x4 bit for bit"
    for r in two_nodes:
        assert r.host == r.node, f"rank {r.rank} ran on {r.node} but reported host {r.host}"
    assert {r.node for r in two_nodes} == {"node0", "node1"}

    status = lab("status")
    assert status.returncode == 0
    assert status.stdout.count("exited 0") == 2 and re.search(r"10\.213\.\d+\.11 ", status.stdout)


def test_down_cleans_up_after_the_lab_process_is_killed(lab):
    """SIGKILL `lab run` mid-job: the agents and workers live on; `lab down` must find them all."""
    proc = lab.popen("run", "--nodes", "2", "--nproc-per-node", "2", str(SCRIPTS / "hold.py"))
    try:
        assert wait_for_output(proc, " ready on ", count=4, timeout_s=120), "the job never came up"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # 2 shims + 2 agents + 4 workers outlive the lab process
        assert len(procs.marked_pids(str(lab.run_dir.resolve()))) >= 8
        lab_id = lab.lab_id
        assert netns.leftovers(lab_id)
    finally:
        proc.kill()
        proc.stdout.close()

    out = lab("down")
    assert out.returncode == 0
    assert f"removed netns tlab-{lab_id}-node0" in out.stdout, out.stdout
    assert left_behind(lab.run_dir, lab_id) == []
    assert not lab.run_dir.exists()


def test_a_failed_node_fails_the_job_and_the_others_are_stopped(lab):
    """Without this, node0's agent would wait out the process-group timeout (set to 10 min here)."""
    out = lab("run", "--nodes", "2", "--nproc-per-node", "1", "--pg-timeout", "600", str(SCRIPTS / "fail_on_node1.py"))
    assert out.returncode != 0
    assert "stopping node0" in out.stdout
    assert "job failed" in out.stdout
    assert procs.marked_pids(str(lab.run_dir.resolve())) == []


@loopback_labs
def test_loopback_nodes_run_the_trainer_with_exporters(lab):
    """Loopback nodes share a hostname: their exporters and event logs must still not collide."""
    out = lab(
        "run",
        "--hosts",
        "loopback",
        "--prometheus",
        "off",
        "--metrics-port",
        "19400",
        script_path("trainer"),
        "--steps",
        "20",
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert len({r.exact for r in ranks_from(out.stdout)}) == 1 and len(ranks_from(out.stdout)) == 4


def test_preloaded_workers_run_a_script_like_python_does(lab):
    """Under --worker-start preload (torchrun's --run-path) a script still imports the module
    next to it, may choose its own multiprocessing start method, and ending with sys.exit(None)
    ends the job instead of hanging its agent."""
    out = lab(
        "run",
        "--worker-start",
        "preload",
        "--nodes",
        "2",
        "--nproc-per-node",
        "1",
        "--prometheus",
        "off",
        str(SCRIPTS / "neighbours" / "exit_none.py"),
        timeout=180,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert out.stdout.count("hello from a neighbour module") == 2
    assert "job succeeded" in out.stdout


def sleeping(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                found.append(int(pid))
        except OSError:
            continue
    return found


@loopback_labs
def test_a_process_the_job_leaves_behind_is_stopped_with_its_node(lab):
    """On loopback hosts nothing (no namespace) takes a daemon the script started with a clean
    environment and a session of its own; the node's shim, its subreaper, does."""
    marker = f"{9000 + os.getpid() % 997}.5"
    out = lab("run", "--hosts", "loopback", "--nodes", "1", "--nproc-per-node", "1", "--prometheus", "off",
              str(SCRIPTS / "escapes.py"), marker)  # fmt: skip
    try:
        assert out.returncode == 0 and f"left sleep {marker} behind" in out.stdout, out.stdout + out.stderr
        assert sleeping(marker) == []
    finally:
        for pid in sleeping(marker):
            os.kill(pid, 9)
