"""Two labs on one machine, and signals: real netns hosts, real jobs, real drills.

Lab A runs a long job; a drill in lab B (another run dir) kills a worker, restarts and
passes, and A runs on untouched: its processes, hosts and Prometheus. SIGTERM and SIGHUP
to `lab` tear down exactly as Ctrl-C does."""

from __future__ import annotations

import re
import signal
import time

import pytest
from conftest import SCRIPTS, Lab, needs_netns, report_of, wait_for_output

from lab import procs
from lab.rundir import RunDir
from lab.runtimes import netns

pytestmark = [pytest.mark.slow, needs_netns]


def test_a_drill_beside_a_running_lab_passes_and_leaves_it_running(lab, tmp_path):
    up = lab(
        "up", "--workload", "trainer", "--detach", "--prometheus", "on", "--", "--steps", "3000", "--step-time", "0.1"
    )
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    a_id = RunDir(lab.run_dir).lab_id
    deadline = time.monotonic() + 120
    while len(procs.marked_pids(str(lab.run_dir))) < 8 and time.monotonic() < deadline:
        time.sleep(0.5)  # 2 shims + 2 agents + 4 workers, once the workers are up
    time.sleep(2)
    a_pids, a_hosts = procs.marked_pids(str(lab.run_dir)), netns.leftovers(a_id)
    assert len(a_pids) >= 8 and a_hosts
    other = Lab(run_dir=tmp_path / "b")
    try:
        drill = other("exercise", "run", "kill-worker", "--prometheus", "on", timeout=600)
        b_id = RunDir(other.run_dir).lab_id
    finally:
        other("down")
    assert drill.returncode == 0, drill.stdout[-3000:] + drill.stderr[-2000:]
    assert report_of(drill)["verdict"] == "pass"
    assert b_id != a_id and netns.leftovers(b_id) == []
    assert [p for p in a_pids if not procs.alive(p)] == [], "lab B's drill or teardown touched lab A"
    assert netns.leftovers(a_id) == a_hosts
    status = lab("status")
    assert len(re.findall(r"pid \d+\s+running", status.stdout)) == 2, status.stdout
    assert "agent node0: up" in status.stdout, status.stdout
    # `lab why` while the job runs: what it recorded so far, and that it is still running.
    during = lab("why")
    assert during.returncode == 0, during.stderr
    assert during.stdout.startswith("no rank failed") and "the job is still running (node0, node1)" in during.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_a_signal_to_lab_run_tears_everything_down(lab, sig):
    proc = lab.popen("run", "--nodes", "2", "--nproc-per-node", "2", str(SCRIPTS / "hold.py"))
    try:
        assert wait_for_output(proc, " ready on ", count=4, timeout_s=120), "the job never came up"
        lab_id = RunDir(lab.run_dir).lab_id
        proc.send_signal(sig)
        proc.wait(60)
    finally:
        proc.kill()
        proc.stdout.close()
    assert proc.returncode == 128 + sig
    assert procs.marked_pids(str(lab.run_dir)) == []
    assert netns.leftovers(lab_id) == []
    assert not lab.run_dir.exists()


def test_a_reader_that_goes_away_leaves_nothing_running(lab):
    """`lab exercise run kill-worker | head -1`: the pipe closes under the drill; its
    teardown still runs (its progress lines go nowhere) and nothing of the lab is left."""
    proc = lab.popen("exercise", "run", "kill-worker")
    try:
        assert wait_for_output(proc, "workers up", count=1, timeout_s=180), "the drill never came up"
        lab_id = RunDir(lab.run_dir).lab_id
        proc.stdout.close()  # as `head -1` exits
        proc.wait(300)
    finally:
        proc.kill()
    assert procs.marked_pids(str(lab.run_dir)) == []
    assert netns.leftovers(lab_id) == []
    assert lab("status").returncode == 3
