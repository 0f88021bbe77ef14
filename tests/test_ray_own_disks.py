"""The Ray runtime on machines that share no disk (lab.runtimes.ray_mirror): a real two-machine Ray
cluster of netns hosts (lab.bench.ray_cluster) whose second machine has a disk of its own: an
empty tmpfs over the folder of the run dirs, which is also its TMPDIR (the nodes' temp dirs), seen
only in its mount namespace, so that nothing there can be shared with the first by accident. The driver runs
on the first machine, as a user on a cluster would run it."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from conftest import REPO, needs_netns, report_of

from lab import procs
from lab.bench.ray_cluster import ray_cluster
from lab.rundir import RunDir
from lab.runtimes.ray_mirror import SHARE_TOKEN

pytestmark = [pytest.mark.slow, needs_netns, pytest.mark.xdist_group("ray-own-disks")]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("own-disks")


@pytest.fixture(scope="module")
def cluster(base):
    # Machine 1 has a disk of its own over the run dirs, its TMPDIR there (the nodes' temp dirs)
    with ray_cluster("ee0b5", own_disks={1: [str(base)]}) as started:  # a test-only lab id
        yield started


@pytest.fixture
def run_dir(request, base, cluster):
    path = base / re.sub(r"\W", "-", request.node.name)
    try:
        yield path
    finally:
        if (path / "state.json").exists():  # a recorded lab only (see tests/test_ray_runtime.py)
            cluster.on_head("down", run_dir=path, timeout=120)
        assert not cluster.as_seen_by(1, path).exists(), "the run dir's copy outlived the lab on machine 1"


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def on_ray(cluster, *argv: str, run_dir: Path, timeout: float = 600):
    """`lab ARGV` on the ray runtime: its flags go after the command's words, before the first flag
    (and so before a script and its arguments)."""
    cut = next((i for i, arg in enumerate(argv) if arg.startswith("-")), len(argv))
    ray = ("--runtime", "ray", "--ray-address", cluster.address)
    return cluster.on_head(*argv[:cut], *ray, *argv[cut:], run_dir=run_dir, timeout=timeout)


def test_a_job_runs_each_machine_writes_its_own_disk_and_the_driver_holds_the_record(cluster, run_dir):
    up = on_ray(
        cluster, "up", "--prometheus", "on", "--detach", "--workload", "trainer", "--", "--steps", "300",
        "--step-time", "0.1", run_dir=run_dir,
    )  # fmt: skip
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    there = cluster.as_seen_by(1, run_dir)
    assert (there / "nodes" / "node1").is_dir() and not (there / SHARE_TOKEN).exists(), "machine 1's own copy"
    temp = run_dir.parent / f"tlab-tmp-{RunDir(run_dir).lab_id}"  # node1's TMPDIR, on machine 1's own disk
    assert cluster.as_seen_by(1, temp).is_dir() and not temp.exists()
    assert not (run_dir / "nodes" / "node0").is_relative_to(there)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # node1's exporter found by Prometheus beside the driver
        status = cluster.on_head("status", run_dir=run_dir)
        if "agent node1: up" in status.stdout:
            break
        time.sleep(2)
    assert "agent node0: up" in status.stdout and "agent node1: up" in status.stdout, status.stdout
    assert (run_dir / "nodes" / "node1" / "node.log").read_text().count("[lab.node.launch]") >= 1
    ranks = {int(p.name[4]) for p in (run_dir / "events").glob("rank*.jsonl")}
    assert ranks == {0, 1, 2, 3}, "ranks 2 and 3 wrote on machine 1's disk; their events are here"
    follower = [p for p in procs.marked_pids(str(run_dir)) if b"lab.runtimes.ray_follower" in cmdline(p)]
    assert len(follower) == 1, "one copier on the driver's machine, outliving the detached `lab up`"
    down = cluster.on_head("down", run_dir=run_dir, timeout=120)
    assert f"removed run dir {run_dir} on {cluster.hosts[1].address}" in down.stdout, down.stdout
    assert not procs.marked_pids(str(run_dir)), "the copier outlived lab down"
    assert not cluster.as_seen_by(1, temp).exists(), "node1's temp dir outlived lab down"


@pytest.mark.parametrize(
    "drill, rank",
    [("kill-worker", "3"), ("kill-node", "2"), ("preempt", "3")],
    ids=["kill-worker", "kill-node", "preempt"],
)
def test_a_drill_striking_the_machine_with_its_own_disk_passes_bit_identical(cluster, run_dir, drill, rank):
    out = on_ray(cluster, "exercise", "run", drill, "--target-rank", rank, run_dir=run_dir)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["runtime"] == "ray" and report["verdict"] == "pass", report
    assert "on node1" in out.stdout, "the fault struck the machine with a disk of its own"
    bits = [c for c in report["checks"] if c["name"].startswith("final weights bit-identical")]
    assert bits and bits[0]["ok"], report["checks"]


def test_a_failure_on_the_machine_with_its_own_disk_is_named_from_the_driver(cluster, run_dir):
    script = REPO / "tests" / "user_scripts" / "natural" / "assertion_on_one_rank.py"  # rank 1 fails
    out = on_ray(cluster, "run", "--nproc-per-node", "1", "--prometheus", "off", str(script), run_dir=run_dir)
    assert out.returncode != 0 and "(Ray machine)" in out.stdout, out.stdout[-3000:]
    first = "first failure: rank 1 on node1 (local rank 0"
    assert first in out.stdout and "AssertionError: expected a batch of 4, got 3" in out.stdout, out.stdout[-3000:]
    why = cluster.on_head("why", run_dir=run_dir)
    assert why.returncode == 0 and first in why.stdout, why.stdout + why.stderr


def test_what_cannot_run_without_a_shared_disk_is_one_line(cluster, run_dir):
    doctor = on_ray(cluster, "doctor", run_dir=run_dir)
    assert doctor.returncode == 1 and doctor.stderr.count("\n") == 1, doctor.stdout + doctor.stderr
    assert "lab doctor's probes meet in the run dir, and node1 does not share" in doctor.stderr
    assert not run_dir.exists(), "what the doctor made is gone"
    fsdp2 = on_ray(cluster, "exercise", "run", "kill-worker", "--parallel", "fsdp2", run_dir=run_dir)
    assert fsdp2.returncode != 0 and "--parallel fsdp2: DCP's step is one folder" in fsdp2.stdout + fsdp2.stderr
    copied = REPO / "tests" / "user_scripts" / "snapshot_every_epoch.py"  # on every machine, with the lab
    drill = on_ray(cluster, "exercise", "run", "kill-worker", "--script", str(copied), run_dir=run_dir)
    assert drill.returncode != 0, drill.stdout[-2000:]
    assert "kill-worker: a drill on your script: its ranks resume from what it saved" in drill.stdout
    script = run_dir.parent / "only_here.py"  # on the driver's disk, not on machine 1's
    script.write_text("print('never runs')\n")
    missing = on_ray(cluster, "run", "--prometheus", "off", str(script), run_dir=run_dir)
    assert missing.returncode != 0 and f"{script} is not on node1's machine" in missing.stderr, missing.stderr
    cluster.as_seen_by(1, run_dir).mkdir()  # a folder already there, on machine 1's own disk
    (cluster.as_seen_by(1, run_dir) / "theirs").write_text("kept")
    found = on_ray(cluster, "up", "--prometheus", "off", run_dir=run_dir)
    assert found.returncode != 0 and f"node1 ({cluster.hosts[1].address}): {run_dir} is already there" in found.stderr
    assert (cluster.as_seen_by(1, run_dir) / "theirs").read_text() == "kept", "what the lab did not make is left"
    (cluster.as_seen_by(1, run_dir) / "theirs").unlink()
    cluster.as_seen_by(1, run_dir).rmdir()
