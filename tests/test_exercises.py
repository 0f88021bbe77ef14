"""Exercises run for real on netns hosts, driven by a real local Ray; their verdicts are asserted.

One system test per fault (and per rendezvous backend). A variant of a drill whose act is the
same and whose verdict differs (kill-node --elastic, hang-rank --watchdog) is judged in
tests/unit/test_judges.py on what a real run of it saw (tests/fixtures/drills/).
"""

import re
import shutil
import signal
import time

import pytest
from conftest import left_behind, loopback_labs, needs_netns, report_of, wait_for_output

from lab import procs
from lab.exercises import hang_rank
from lab.inprocess import heartbeat

pytestmark = [pytest.mark.slow, needs_netns]


def assert_nothing_left(lab) -> None:
    assert left_behind(lab.run_dir, lab.lab_id) == []
    kept = {"reports", "logs", ".torchrun-lab"}  # what `lab down` keeps: the reports and Ray's notices
    assert {p.name for p in lab.run_dir.iterdir()} <= kept


# kill-worker's own verdict (restart, resume, bit-identical weights, the recovery stages) is
# asserted where docs/exercises.md's command runs: tests/test_docs_path.py, other orders.


def test_kill_worker_with_torch_defaults_shows_the_upstream_restart_failure(lab):
    out = lab("exercise", "run", "kill-worker", "--torch-defaults", timeout=400)
    assert out.returncode == 0, out.stdout[-3000:]
    report = report_of(out)
    assert report["verdict"] == "pass"
    assert "135712" in report["explanation"]
    assert "connectFullMesh" in out.stdout


def test_corrupt_checkpoint_falls_back_to_the_previous_one(lab):
    out = lab("exercise", "run", "corrupt-checkpoint", timeout=400)
    assert out.returncode == 0, out.stdout[-3000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and report["final_weights_match_reference"] is True
    assert [c["name"] for c in report["checks"] if not c["ok"]] == []


@pytest.mark.parametrize(
    ("damage", "reason", "damaged"),
    [
        ("truncate", "differs from what was saved", r"__\d_0\.distcp"),  # a shard cut in half
        ("no-metadata", "missing .metadata", r"\.metadata"),  # a save killed before its end
        ("mixed-steps", "differs from what was saved", r"__\d_0\.distcp"),  # a shard of the step before
    ],
)
def test_corrupt_checkpoint_of_an_fsdp2_job_falls_back_to_the_previous_dcp_step(lab, damage, reason, damaged):
    """The trainer sharded (--parallel fsdp2), checkpointing through DCP: the newest step
    damaged each way a DCP folder goes wrong, the step is set aside whole and the one before
    loaded, bit-identical at the end (the reference runs once, for the first of them)."""
    out = lab("exercise", "run", "corrupt-checkpoint", "--parallel", "fsdp2", "--damage", damage, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and report["final_weights_match_reference"] is True
    assert [c["name"] for c in report["checks"] if not c["ok"]] == []
    assert report["damage"]["how"] == damage
    assert re.fullmatch(rf".*/checkpoints/dcp_000000\d0/{damaged}", report["damage"]["path"]), report["damage"]
    detected = next(c for c in report["checks"] if c["name"] == "the damaged checkpoint was detected")
    assert reason in detected["detail"]
    assert "recovery: restart" in out.stdout


def test_preempt_checkpoints_together_and_the_rerun_loses_no_step(lab):
    """At a size of the user's choosing (3 nodes x 1 worker): a drill on the lab's trainer runs
    at any topology, its judge counting the ranks there are."""
    out = lab("exercise", "run", "preempt", "--nodes", "3", "--nproc-per-node", "1", timeout=400)
    assert out.returncode == 0, out.stdout[-3000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and report["lost_steps"] == 0 and report["world_size"] == 3
    assert report["final_weights_match_reference"] is True
    stopped = next(c for c in report["checks"] if c["name"].startswith("every rank stopped"))
    assert stopped["ok"] and stopped["detail"].count("'preempted'") == 3


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="hang-rank watches the rank in Prometheus")
def test_hang_rank_is_seen_in_prometheus_and_its_keeper_ends_it_in_process(lab):
    """The default style for a frozen rank is in-process: its keeper hears no heartbeat and
    SIGKILLs it long before the 10 s process-group timeout, and a spare takes over. (The restart
    path, timeout and SIGTERM-to-SIGKILL wait: the recorded hang-rank run in tests/unit and
    tests/test_stop_grace.py; on a script, lab ci's hang-rank in tests/test_ci_fresh_venv.py.)"""
    out = lab("exercise", "run", "hang-rank", timeout=400)
    assert out.returncode == 0, out.stdout[-3000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and report["recovery_style"]["style"] == "in-process"
    assert report["replacements"] == 1 and report["lost_steps"] <= 1, report
    ended = report["seconds_until_the_keeper_ended_it"]
    # Silence counts from the last beat, up to a beat before the freeze; the drill dates the
    # freeze once its signal has gone out: never before the threshold, give or take that. (Before
    # the timeout: the verdict's own check, "... before the 10 s timeout".)
    assert heartbeat.frozen_after(hang_rank.PG_TIMEOUT_S) - 1 < ended, ended
    assert report["seconds_until_prometheus_saw_it"] is not None
    # Forensics while it hung: rank 1 silent (SIGSTOPped), the other three waiting in one collective.
    assert report["forensics"]["silent"] == [1] and report["forensics"]["answered"] == [0, 2, 3]
    assert report["forensics"]["collective"].startswith("all_reduce #")


def test_kill_node_fixed_job_recovers_when_the_node_comes_back(lab):
    out = lab("exercise", "run", "kill-node", timeout=400)
    assert out.returncode == 0, out.stdout[-3000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and report["world_size_after"] == [4]
    assert [f["fault"] for f in report["faults"]] == ["kill_node", "restart"]
    assert report["final_weights_match_reference"] is True


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="the straggler alert fires in Prometheus")
def test_straggler_slows_everyone_and_the_alert_names_it(lab):
    out = lab("exercise", "run", "straggler", timeout=400)
    assert out.returncode == 0, out.stdout[-3000:]
    report = report_of(out)
    assert report["verdict"] == "pass"
    busy = {int(k): v for k, v in report["busy_seconds_per_step"].items()}
    assert max(busy, key=busy.get) == 1


def test_partition_times_out_at_the_process_group_timeout_and_recovers_after_the_heal(lab):
    out = lab("exercise", "run", "partition-node", timeout=400)
    assert out.returncode == 0, out.stdout[-3000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and report["restarts"] >= 1
    assert any("Timed out" in e for e in report["errors_seen"])
    # Forensics during the cut: every rank answers (a file, not the network) and none is behind.
    assert report["forensics"]["answered"] == [0, 1, 2, 3] and report["forensics"]["suspects"] == []
    assert "none is behind" in report["forensics"]["finding"]


def test_killing_the_rendezvous_host_fails_the_whole_job(lab):
    out = lab("exercise", "run", "kill-rendezvous-host", timeout=400)
    assert out.returncode == 0, out.stdout[-3000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and "node0" in report["explanation"]


@loopback_labs  # its etcd serves on the host from torchrun's port, where loopback labs' stores listen
def test_with_etcd_v2_the_survivor_waits_for_the_rendezvous_host_to_return(lab):
    out = lab("exercise", "run", "kill-rendezvous-host", "--rdzv-backend", "etcd-v2", timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and report["final_weights_match_reference"] is True
    assert "started etcd (v2 API)" in out.stderr + out.stdout
    assert "the survivor waited in the next round" in out.stdout
    assert_nothing_left(lab)  # etcd carries the lab's mark like every process it starts


def test_collective_mismatch_fails_fast_naming_the_mismatch(lab):
    out = lab("exercise", "run", "collective-mismatch", timeout=400)
    assert out.returncode == 0, out.stdout[-3000:]
    report = report_of(out)
    # Fast because DETAIL names the mismatch itself (below), where without it the job waits out its timeout.
    assert report["verdict"] == "pass" and report["seconds_to_failure"] is not None
    assert "Detected mismatch between collectives" in out.stdout


def test_an_exercise_that_errors_mid_drill_leaves_nothing_behind(lab):
    """kill-node refuses to kill the rendezvous host, but only once the job runs and rank 0 is found on node0."""
    out = lab("exercise", "run", "kill-node", "--target-rank", "0", timeout=300)
    assert out.returncode == 1
    assert "kill-rendezvous-host" in out.stderr.strip().splitlines()[-1]
    assert "Traceback" not in out.stderr
    assert_nothing_left(lab)


@pytest.mark.parametrize(
    "sig, times",
    [(signal.SIGINT, 1), (signal.SIGTERM, 1), (signal.SIGINT, 2)],
    ids=["ctrl-c", "sigterm", "ctrl-c-twice"],
)
def test_an_interrupted_exercise_leaves_nothing_behind(lab, sig, times):
    """Ctrl-C, or SIGTERM as a CI runner or `kill` sends it: the same teardown. A second Ctrl-C,
    sent while the first one's teardown runs, is answered in words and cuts nothing short
    (it once left namespaces, firewall rules and a node's processes)."""
    proc = lab.popen("exercise", "run", "kill-worker")
    try:
        assert wait_for_output(proc, "waiting for rank", count=1, timeout_s=120)
        time.sleep(3)  # the job and Ray are running now
        assert procs.marked_pids(str(lab.run_dir.resolve())), "the exercise should be running"
        proc.send_signal(sig)
        for _ in range(times - 1):
            time.sleep(0.3)  # inside the teardown the first one started
            proc.send_signal(sig)
        proc.wait(60)
    finally:
        proc.kill()
        proc.stdout.close()
    assert proc.returncode == 128 + sig
    assert_nothing_left(lab)
