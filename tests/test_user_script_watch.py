"""What lab.node.user_script records around an unmodified script under real torchrun, and
result-file comparison. Which lines are progress: tests/unit/test_progress_lines.py."""

import json
import re

import pytest
import torch
from conftest import REPO, torchrun

from lab.exercises.script.compare import compare
from lab.node.user_script import DEFAULT_REGEX

SCRIPTS = REPO / "tests" / "user_scripts"


@pytest.mark.slow  # real torchrun jobs: the system tier
def test_the_watcher_records_start_helper_steps_loads_and_the_exception_line(tmp_path):
    """Real torchrun, 2 workers, the script unmodified: it runs in --workdir, the helper's steps
    are recorded (its printed 'epoch 10x' is not), and rank 1's exception names the script's line."""
    events, work = tmp_path / "events", tmp_path / "work"
    out = torchrun(
        "--nproc-per-node=2",
        "--module",
        "lab.node.user_script",
        "--workdir",
        str(work),
        "--events-dir",
        str(events),
        str(SCRIPTS / "helper_and_crash.py"),
        timeout=120,
    )
    assert out.returncode != 0
    assert (work / "marker-0.txt").read_text() == str(work)
    records = {r: [json.loads(line) for line in (events / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)}
    steps = [(e["step"], e["unit"], e["source"]) for e in records[0] if e["event"] == "step"]
    # Its first line came before its first helper call; after that only the helper counts.
    assert steps == [(100, "epoch", "output"), *((i, "step", "helper") for i in range(5))]
    assert [e["event"] for e in records[1]][:2] == ["start", "rendezvous_done"]
    crash = records[1][-1]
    assert crash["event"] == "exit" and crash["reason"] == "exception"
    assert crash["error"] == "ValueError: bad batch on purpose"
    source = (SCRIPTS / "helper_and_crash.py").read_text().splitlines()
    raise_line = next(i for i, text in enumerate(source, 1) if "raise ValueError" in text)
    assert crash["where"] == f"{SCRIPTS / 'helper_and_crash.py'}:{raise_line}"


def test_compare_bitwise_then_within_rtol(tmp_path):
    # One file name in three runs' folders, as the drill keeps them: torch.save writes the
    # file's own name into its archive, so differently named files never match bitwise.
    a, b, c = (tmp_path / run / "result.pt" for run in ("reference", "fault", "other"))
    for path in (a, b, c):
        path.parent.mkdir()
    torch.save({"w": torch.tensor([1.0, 2.0])}, a)
    torch.save({"w": torch.tensor([1.0, 2.0])}, b)
    torch.save({"w": torch.tensor([1.0, 2.0 + 1e-6])}, c)
    assert compare(a, b, None)[0]
    ok, detail = compare(c, a, None)
    assert not ok and "bitwise" in detail
    assert compare(c, a, 1e-5)[0]
    ok, detail = compare(c, a, 1e-8)
    assert not ok and "over" in detail
    text, other = tmp_path / "r.txt", tmp_path / "s.txt"
    text.write_text("0.100000 -0.250000\n")
    other.write_text("0.100001 -0.250000\n")
    assert compare(other, text, 1e-4)[0] and not compare(other, text, 1e-7)[0]
    ok, detail = compare(tmp_path / "missing.pt", a, None)
    assert not ok and "wrote no" in detail


def test_a_number_near_zero_is_compared_at_the_numbers_typical_size_and_a_real_difference_still_fails(tmp_path):
    """Rounding after a resume moves a weight of 1e-6 by as much again: within --rtol of the file's
    typical size, not a failure; a weight that moved by a tenth of itself still is one."""
    reference, rounded, moved = (tmp_path / f"{name}.txt" for name in ("reference", "rounded", "moved"))
    reference.write_text("1.0\n-0.8\n0.000001\n0.5\n")
    rounded.write_text("1.0\n-0.8\n0.000002\n0.5000001\n")
    moved.write_text("1.0\n-0.8\n0.000001\n0.55\n")
    ok, how = compare(rounded, reference, 1e-3)
    assert ok and "within 0.001" in how, how
    ok, how = compare(moved, reference, 1e-3)
    assert (
        not ok
        and "largest difference 0.0727 of the number or of their typical size 0.687" in how
        and "over 0.001" in how
    ), how


@pytest.mark.slow  # real torchrun jobs: the system tier
def test_forensics_name_the_rank_that_never_entered_the_collective(tmp_path):
    """Real torchrun, 3 workers: rank 1 sleeps at step 5 instead of entering the next all-reduce.
    Asked while the others wait (30 s timeout), every rank answers from its forensics thread,
    and the Flight Recorder's sequence numbers say rank 1 is one collective behind, in the sleep."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import SCRIPTS as LAB_SCRIPTS

    from lab.exercises import forensics

    events = tmp_path / "events"
    script = LAB_SCRIPTS / "fail_one_rank.py"
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "200"}
    argv = [sys.executable, "-m", "torch.distributed.run", f"--log-dir={tmp_path / 'logs'}", "--nproc-per-node=3",
            "--module", "lab.node.user_script", "--workdir", str(tmp_path / "work"), "--events-dir", str(events),
            str(script), "--rank", "1", "--how", "hang", "--timeout", "30"]  # fmt: skip
    job = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            steps = (
                [line for line in (events / "rank0.jsonl").read_text().splitlines() if '"step"' in line]
                if (events / "rank0.jsonl").exists()
                else []
            )
            if len(steps) >= 5:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # ranks 0 and 2 are in the all-reduce rank 1 never joins
        found = forensics.collect(events, 3)
    finally:  # torchrun stops its workers (each in a session of its own) on SIGTERM
        job.send_signal(signal.SIGTERM)
        job.wait(60)
    sleep_line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "time.sleep(3600)" in text)
    assert found["answered"] == [0, 1, 2] and found["behind"] == [1] and found["suspects"] == [1], found
    # Told apart by where each main thread stands: inside torch's all_reduce, or in the script's sleep.
    assert {r: info["in_collective"] for r, info in found["ranks"].items()} == {"0": True, "1": False, "2": True}
    assert found["collective"].startswith("all_reduce #")
    assert f"fail_one_rank.py:{sleep_line} in <module>" in found["finding"], found["finding"]
    assert found["finding"].startswith("rank 1 never entered all_reduce #")


@pytest.mark.slow  # real torchrun jobs: the system tier
def test_a_script_that_exits_with_an_error_keeps_its_own_words(tmp_path):
    """argparse's error goes to stderr and the node's log is gone after teardown: the exit
    record keeps the script's last lines of stderr (what the drill's verdict then quotes)."""
    import subprocess
    import sys

    script = tmp_path / "needs_args.py"
    script.write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--data', required=True)\np.parse_args()\n"
    )
    events = tmp_path / "events"
    out = subprocess.run(
        [sys.executable, "-m", "lab.node.user_script", "--events-dir", str(events), str(script)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 2 and "required: --data" in out.stderr  # passed through as it was
    (record,) = [json.loads(line) for line in (events / "rank0.jsonl").read_text().splitlines()][-1:]
    assert record["event"] == "exit" and record["reason"] == "exit_status" and record["code"] == 2
    assert record["stderr"][-1].endswith("error: the following arguments are required: --data")


@pytest.mark.slow  # real torchrun jobs: the system tier
def test_a_scripts_saves_are_recorded_with_where_they_went(tmp_path):
    """When a script last saved is what its resume is measured against (a sparse snapshot's)."""
    import subprocess
    import sys

    script = tmp_path / "saves.py"
    script.write_text("import torch\ntorch.save({'epoch': 0}, 'snap.pt')\ntorch.save({'epoch': 1}, f='snap.pt')\n")
    events = tmp_path / "events"
    out = subprocess.run(
        [sys.executable, "-m", "lab.node.user_script", "--events-dir", str(events), "--workdir", str(tmp_path / "w"),
         str(script)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in (events / "rank0.jsonl").read_text().splitlines()]
    assert [(r["path"], r["how"]) for r in records if r["event"] == "saved"] == [("snap.pt", "torch.save")] * 2
    assert (tmp_path / "w" / "snap.pt").exists()


def test_the_labs_own_echoed_events_are_never_read_as_progress(tmp_path, monkeypatch):
    """In pods the lab echoes each event to stderr as `@lab-event rank0 {"step": 3, ...}`; JSON log
    lines are progress too, so the watcher read its own echo, wrote a step, echoed it, and
    recursed until the pod died (CI's k8s faithful runs: "a pod ended before step 3")."""
    import sys

    from lab.health.events import ECHO_PREFIX, EventLog
    from lab.node.user_script import watch_output

    log = EventLog(tmp_path, rank=0, local_rank=0)
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    watch_output(log, re.compile(DEFAULT_REGEX))
    sys.stderr.write(f'{ECHO_PREFIX}rank0 {{"event": "step", "step": 3}}\n')
    sys.stdout.write('{"step": 4, "loss": 0.5}\n')
    steps = [line for line in (tmp_path / "rank0.jsonl").read_text().splitlines() if '"event": "step"' in line]
    assert len(steps) == 1 and '"step": 4' in steps[0]
