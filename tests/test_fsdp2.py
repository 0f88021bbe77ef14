"""The trainer's FSDP2 mode under torchrun: killed in the middle of an async DCP save, its
newest step then damaged, it resumes from the newest whole step and ends bit-identical to an
uninterrupted run."""

import os
import signal
import subprocess
import sys

import pytest
from conftest import REPO
from test_trainer import final_checksums, wait_for_step

from lab.health.events import read_events
from lab.workloads import script_path

TRAINER = script_path("trainer")
EVERY = 10


def torchrun(tmp_path, *args: str) -> list[str]:
    """Three ranks: with two, a reduction's order cannot show, and neither can a drift in it."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=3",
        f"--log-dir={tmp_path / 'torchrun-logs'}",
        TRAINER,
        "--parallel",
        "fsdp2",
        "--ckpt-shared",
        "--ckpt-every",
        str(EVERY),
        *args,
    ]


def finished(cmd: list[str]) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def killed_during_a_save(tmp_path, ckpt: str, ev) -> int:
    """The whole job SIGKILLed a step after an async save began (its write still in flight or
    not yet committed); the step it was at."""
    job = subprocess.Popen(
        torchrun(
            tmp_path,
            "--steps",
            "60",
            "--save",
            "async",
            "--step-time",
            "0.1",
            "--ckpt-dir",
            ckpt,
            "--events-dir",
            str(ev),
        ),  # fmt: skip
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd=REPO,
    )
    try:
        at = wait_for_step(ev, lambda s: s > 3 * EVERY and s % EVERY == 1)
        workers = {e["pid"] for e in read_events(ev) if e["event"] == "start"}
        for pid in [job.pid, *workers]:
            os.kill(pid, signal.SIGKILL)
        job.wait(10)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    return at


@pytest.mark.slow  # three torchrun jobs of three ranks
def test_killed_in_an_async_save_then_damaged_fsdp2_resumes_from_the_newest_whole_step_bit_identical(tmp_path):
    reference = finished(torchrun(tmp_path, "--steps", "60", "--ckpt-dir", str(tmp_path / "ref")))
    ckpt, ev = tmp_path / "ckpt", tmp_path / "ev"
    at = killed_during_a_save(tmp_path, str(ckpt), ev)
    whole = sorted(p.name for p in ckpt.glob("dcp_*"))
    assert whole, f"no step committed by step {at}"
    newest = ckpt / whole[-1]
    shard = newest / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # its newest step damaged, too

    resumed = finished(torchrun(tmp_path, "--steps", "60", "--ckpt-dir", str(ckpt), "--events-dir", str(ev)))
    events = list(read_events(ev))
    invalid = [e["path"] for e in events if e["event"] == "checkpoint_invalid"]
    loaded = [e["step"] for e in events if e["event"] == "checkpoint_loaded"]
    assert invalid == [str(newest)] and (ckpt / f"{newest.name}.bad").is_dir()
    assert loaded and set(loaded) == {int(newest.name.split("_")[1]) - EVERY}, (loaded, whole, at)
    assert len(final_checksums(reference.stdout)) == 1
    assert final_checksums(resumed.stdout) == final_checksums(reference.stdout)
