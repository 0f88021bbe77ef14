"""`lab run --recovery in-process` on netns hosts: a keeper per node, a rank SIGKILLed mid-run,
its place taken by the warm spare, no step redone, and the weights of a run that lost no rank
(which `lab run` recovers in-process by default); and the kill-worker drill judging the same."""

import json
import os
import signal
import time

import pytest
from conftest import left_behind, needs_netns

from lab import recovery
from lab.health.events import read_events
from lab.node import worker_record
from lab.workloads import script_path

pytestmark = [pytest.mark.slow, needs_netns]
JOB = (
    "run",
    "--recovery",
    "in-process",
    "--max-restarts",
    "2",
    "--prometheus",
    "off",
    "--nodes",
    "2",
    "--nproc-per-node",
    "2",
)
STEPS = ("--steps", "30", "--step-time", "0.05")


def checksums(output: str) -> set[str]:
    return {line.rsplit("(", 1)[1].split(")")[0] for line in output.splitlines() if " checksum " in line}


def kill_rank_at(lab, events, rank: int, step: int, timeout_s: float = 120) -> float:
    """SIGKILL rank (2 per node) once it reports step, by the pid its keeper recorded; the time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = list(read_events(events)) if events.exists() else []
        if any(e["event"] == "step" and e["rank"] == rank and e["step"] >= step for e in seen):
            record = worker_record.read(lab.run_dir / "nodes" / f"node{rank // 2}" / "workers.json")
            assert record is not None and record[0] == 0, record  # generation 0: nothing replaced yet
            killed = time.time()
            os.kill(record[1][rank % 2], signal.SIGKILL)
            return killed
        time.sleep(0.05)
    raise AssertionError(f"rank {rank} never reached step {step}")


def test_a_killed_rank_is_replaced_in_process_and_the_job_ends_bit_identical(lab, tmp_path):
    """The lab's DDP trainer; the example script (plain all_reduce) runs under the same keepers in
    tests/test_recovery_styles.py, killed at node 0's first rank and node 1's last."""
    script, rank = script_path("trainer"), 2  # node 1's first rank
    # The script's own --events-dir: `lab run` removes its run dir, events and all, when the job ends.
    proc = lab.popen(*JOB, script, *STEPS, "--events-dir", str(tmp_path / "events"))
    try:
        killed = kill_rank_at(lab, tmp_path / "events", rank, step=10)
        lab_id = lab.lab_id  # read while the run dir is there: `lab run` removes it at the end
        output = proc.communicate(timeout=180)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0, output[-3000:]
    assert "recovery: in-process" in output
    assert f"rank {rank} exited (-9); its spare takes over in generation 1" in output
    run = list(read_events(tmp_path / "events"))
    events = [e for e in run if e["time"] > killed]
    failed = {e["rank"] for e in events if e["event"] == "collective_failed"}
    assert failed == {0, 1, 2, 3} - {rank}, [(e["event"], e["rank"]) for e in events]  # every survivor noticed
    handed = [e for e in events if e["event"] == "state_from_peer"]
    assert {e["rank"] for e in handed} == {0, 1, 2, 3} and len({(e["step"], e["source"]) for e in handed}) == 1
    assert handed[0]["source"] != rank
    reached = max(e["step"] for e in run if e["event"] == "step" and e["time"] < killed)
    assert handed[0]["step"] >= reached - 1, json.dumps(handed[0])  # at most the step in flight is lost

    # The same job, no rank lost, with no --recovery: auto picks in-process for a script that opted in.
    reference = lab(*(arg for arg in JOB if arg not in ("--recovery", "in-process")), script, *STEPS)
    assert reference.returncode == 0, reference.stdout[-3000:]
    assert f"recovery: in-process ({recovery.AUTO_IN_PROCESS})" in reference.stdout
    assert len(checksums(reference.stdout)) == 1 and checksums(output) == checksums(reference.stdout)
    assert left_behind(lab.run_dir, lab_id) == []


def test_the_kill_worker_drill_recovers_in_process_by_default_and_judges_it(lab):
    """The drill's own path, with no recovery flag: the engine's job under the keepers, the kill
    through the keeper's pid record, the uninterrupted reference under the same keepers, the
    in-process verdict."""
    drill = lab("exercise", "run", "kill-worker", "--target-rank", "2", "--at-step", "15")
    assert drill.returncode == 0, drill.stdout[-3000:]
    assert f"recovery style: in-process ({recovery.AUTO_IN_PROCESS})" in drill.stdout
    assert "[ok] rank 2's place went to a warm spare, the other ranks stayed" in drill.stdout
    assert "[ok] final weights bit-identical to an uninterrupted run" in drill.stdout
    assert "verdict: PASS" in drill.stdout
