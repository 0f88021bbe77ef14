"""The resumable trainer continues bit for bit from its checkpoints, also after a kill."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO

from lab import results
from lab.exercises import samples
from lab.health.events import read_events
from lab.workloads import script_path

TRAINER = script_path("trainer")


def train(*args, env=None) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, TRAINER, *args], capture_output=True, text=True, timeout=300, cwd=REPO, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def final_checksums(stdout: str) -> set[str]:
    """The exact (hex) checksums in the trainer's closing lines, one per rank."""
    return {r.exact for r in results.parse(stdout, node="local")}


@pytest.mark.slow  # three trainer runs: the system tier
def test_truncated_newest_checkpoint_is_skipped_and_the_run_still_ends_identical(tmp_path):
    reference = train("--steps", "40")
    train("--steps", "30", "--ckpt-dir", str(tmp_path / "ckpt"))
    newest = tmp_path / "ckpt" / "step_00000030.ckpt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])

    resumed = train("--steps", "40", "--ckpt-dir", str(tmp_path / "ckpt"), "--events-dir", str(tmp_path / "ev"))
    events = list(read_events(tmp_path / "ev"))
    invalid = [e for e in events if e["event"] == "checkpoint_invalid"]
    loaded = [e for e in events if e["event"] == "checkpoint_loaded"]
    assert invalid and invalid[0]["path"].endswith("step_00000030.ckpt")
    assert loaded and loaded[0]["step"] == 20
    assert (tmp_path / "ckpt" / "step_00000030.ckpt.bad").exists()
    assert final_checksums(resumed.stdout) == final_checksums(reference.stdout)


@pytest.mark.slow
def test_killed_four_rank_run_resumes_bit_identical_to_an_uninterrupted_one(tmp_path):
    """Four ranks, not two: with two the all-reduce sum is order-free and hides layout drift."""
    steps, every = 60, 10
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=4",
        f"--log-dir={tmp_path / 'torchrun-logs'}",
        TRAINER,
        "--steps",
        str(steps),
        "--ckpt-every",
        str(every),
    ]
    reference = subprocess.run(
        [*torchrun, "--ckpt-dir", str(tmp_path / "ref")], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert reference.returncode == 0, reference.stderr[-2000:]

    ckpt, ev = str(tmp_path / "ckpt"), tmp_path / "ev"
    job = subprocess.Popen(
        [*torchrun, "--ckpt-dir", ckpt, "--events-dir", str(ev), "--step-time", "0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd=REPO,
    )
    try:
        killed_at = wait_for_step(ev, lambda s: s >= 25 and s % every not in (0, 9))
        workers = {e["pid"] for e in read_events(ev) if e["event"] == "start"}
        for pid in [job.pid, *workers]:
            os.kill(pid, signal.SIGKILL)  # every worker and the agent: the whole job dies
        job.wait(10)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()

    resumed = subprocess.run(
        [*torchrun, "--ckpt-dir", ckpt, "--events-dir", str(ev)], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    loaded = [e["step"] for e in read_events(ev) if e["event"] == "checkpoint_loaded"]
    assert loaded and killed_at - every <= loaded[0] <= killed_at, (loaded, killed_at)
    assert final_checksums(resumed.stdout) == final_checksums(reference.stdout)
    assert len(final_checksums(reference.stdout)) == 1


def wait_for_step(events_dir, ok, timeout_s=120) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        steps = (
            [e["step"] for e in read_events(events_dir) if e["event"] == "step" and e["rank"] == 0]
            if events_dir.exists()
            else []
        )
        if steps and ok(steps[-1]):
            return steps[-1]
        time.sleep(0.02)
    raise AssertionError(f"never reached the step: {json.dumps(steps[-3:] if steps else [])}")


@pytest.mark.slow  # two torchrun jobs
@pytest.mark.parametrize("parallel", [[], ["--parallel", "fsdp2", "--ckpt-shared"]], ids=["ddp", "fsdp2"])
def test_a_job_resumed_on_fewer_ranks_goes_on_from_the_next_unconsumed_sample(tmp_path, parallel):
    """4 ranks checkpoint mid-epoch, 3 resume (a node lost for good): the epoch's rest is dealt to
    the 3, so over every epoch no sample is repeated and none skipped (lab.exercises.samples).
    FSDP2's DCP step, saved as 4 shards, loads resharded onto 3."""
    events, ckpt = tmp_path / "ev", str(tmp_path / "ckpt")
    for ranks, steps in ((4, 150), (3, 300)):  # 1024 samples: 32 steps an epoch at 4 ranks; 150 is mid-epoch
        job = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
             f"--log-dir={tmp_path / f'torchrun-logs-{ranks}'}", TRAINER,
             "--steps", str(steps), "--samples", "1024", "--ckpt-every", "50", "--ckpt-dir", ckpt,
             "--events-dir", str(events), *parallel],
            capture_output=True, text=True, timeout=300, cwd=REPO,
        )  # fmt: skip
        assert job.returncode == 0, job.stderr[-2000:]
    loaded = [e for e in read_events(events) if e["event"] == "checkpoint_loaded"]
    assert {e["step"] for e in loaded} == {150} and len(loaded) == 3
    ledger = samples.ledger(list(read_events(events)))
    straddling = next(e for e in ledger if e.epoch == 150 // 32)
    assert straddling.complete and straddling.distinct > 1000 and straddling.repeated == 0
    assert samples.summary(list(read_events(events)))["why"].startswith("0 repeated, 0 skipped")
