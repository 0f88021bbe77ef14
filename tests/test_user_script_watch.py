"""What lab.node.user_script records around an unmodified script under real torchrun, the
progress regex against the forms scripts print, and result-file comparison."""

import json
import re

import pytest
import torch
from conftest import REPO, torchrun

from lab.exercises.script.compare import compare
from lab.node.user_script import DEFAULT_REGEX, progress_value

SCRIPTS = REPO / "tests" / "user_scripts"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("step 12", (12, "step")),
        ("Step: 7 loss 0.3", (7, "step")),
        ("[GPU0] Epoch 3 | Batchsize: 32 | Steps: 8", (3, "epoch")),
        ("epoch=4 lr=0.1", (4, "epoch")),
        ("iter 40/100", (40, "iter")),
        ("Iteration 9", (9, "iter")),
        ("train | step #15 |", (15, "step")),
        ("Epoch: [14][1/4]\tTime  0.161 ( 0.161)", (14, "epoch")),  # pytorch/examples imagenet/main.py
        ('{"step": 12, "loss": 0.41}', (12, "step")),
        ("{'epoch': 3, 'loss': 0.2}", (3, "epoch")),
        ("global_step=300 loss=0.1", (300, "step")),
        ("Epoch 2:  45%|####5     | 45/100 [00:01<00:01]", (2, "epoch")),
        ("Epoch 1 | Iter 10 | data loading 0.12 s | loss 0.3", (1, "epoch")),  # loading, but not a checkpoint
        ("Train Epoch: 3 [1280/60000 (2%)]\tLoss: 0.302", (3, "epoch")),  # pytorch/examples mnist
        ("| epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 41.2", (1, "epoch")),  # word_language_model
        ("Epoch [10/50], Step [100/600], Loss: 0.2173", (10, "epoch")),
        ("Epoch 3, loss 0.2", (3, "epoch")),
        ("step 12.", (12, "step")),
    ],
)
def test_the_default_regex_reads_the_common_forms(line, expected):
    import re

    assert progress_value(re.compile(DEFAULT_REGEX), line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "steps remaining", "stepping 3", "loss 0.25", "epochs: many", "", "{'epoch': 0.5, 'loss': 1.2}", "substep 4",
        # Hugging Face's Trainer logs a fractional epoch: 10.5 is no count, not epoch 1 either.
        "{'loss': 0.52, 'grad_norm': 1.1, 'learning_rate': 5e-05, 'epoch': 10.5}",
        "Epoch 12.25 done",
        # A percentage is no count: "step 7 %" is no step 7 (nor "45%" after a description step 45).
        "step 7 %",
        "Training step: 45%",
        "step 1,234 loss 0.1",  # a thousands separator: read as 1 it would be wrong
    ],
)  # fmt: skip
def test_lines_without_a_count_are_not_progress(line):
    import re

    assert progress_value(re.compile(DEFAULT_REGEX), line) is None


@pytest.mark.parametrize(
    "line",
    [
        "Resuming training from snapshot at Epoch 13",  # pytorch/examples minGPT-ddp: the epoch it finished
        "=> loaded checkpoint 'checkpoint.pth.tar' (epoch 14)",  # pytorch/examples imagenet
        "Loading checkpoint from step 400",
        "  Continuing training from global step 400",  # Hugging Face's Trainer
        "Restored model at iteration 900",
    ],
)
def test_a_line_about_loading_a_checkpoint_is_not_progress_unless_the_users_pattern_says_so(line):
    import re

    assert progress_value(re.compile(DEFAULT_REGEX), line) is None
    assert progress_value(re.compile(r"(?:epoch|step|iteration)\D*(\d+)", re.I), line) is not None


def test_a_custom_regex_with_named_groups():
    import re

    pattern = re.compile(r"(?P<unit>batch)=(?P<n>\d+)")
    assert progress_value(pattern, "lr 0.1 batch=42") == (42, "batch")
    assert progress_value(re.compile(r"done (\d+)"), "done 5 of 9") == (5, "step")


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
    import re
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


@pytest.mark.parametrize(
    ("line", "count"),
    [
        ("  8%|8         | 5/60 [00:01<00:11,  4.93it/s]", 5),  # Hugging Face's Trainer, `tqdm(loader)`
        ("Iteration:  45%|####5     | 45/100 [00:05<00:06,  8.91it/s]", 45),
        ("Training step: 100%|##########| 500/500 [00:50<00:00,  9.9it/s, loss=0.1]", 500),
        ("loss 0.3 | 5/60 done", None),  # no bar: no "[elapsed<remaining" after the count
    ],
)
def test_a_tqdm_bar_with_no_unit_word_is_read_by_its_count(line, count):
    from lab.node.progress_lines import BarReader

    assert progress_value(re.compile(DEFAULT_REGEX), line) is None  # no unit word: the bar reader's
    assert BarReader().read(line) == count


def test_only_the_first_bar_is_read_and_only_while_its_count_goes_on():
    """Nested bars (epochs outside, batches inside) are two bars: the first drawn is read. A bar
    drawn afresh every epoch counts that epoch's batches: once it goes back, none is read."""
    from lab.node.progress_lines import BarReader

    bar = "{0}%|###| {1}/{2} [00:01<00:02, 9.9it/s]"
    nested = BarReader()
    seen = [nested.read(bar.format(0, n, total)) for n, total in ((0, 3), (1, 100), (2, 100), (1, 3), (1, 100))]
    assert seen == [0, None, None, 1, None]
    per_epoch = BarReader()
    seen = [per_epoch.read(bar.format(0, n, 100)) for n in (1, 2, 100, 1, 2, 100)]
    assert seen == [1, 2, 100, None, None, None]


def test_a_tqdm_bar_redrawn_after_carriage_returns_is_read_at_each_new_count_once(tmp_path, monkeypatch):
    """tqdm writes each redraw after a \\r and no newline until the bar closes: every redraw is a
    line to the watcher, and a redraw at the count already read is no new step."""
    import io
    import re
    import sys

    from lab.health.events import EventLog, read_events
    from lab.node.user_script import watch_output

    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    log = EventLog(tmp_path, 0, 0)
    watch_output(log, re.compile(DEFAULT_REGEX))
    bar = "\r  8%|8         | 5/60 [00:01<00:11,  4.9it/s]"
    sys.stderr.write(bar + bar.replace("00:01", "00:02") + "\r 17%|#6        | 10/60 [00:02<00:10,  4.9it/s]")
    sys.stderr.write("\r100%|##########| 60/60 [00:12<00:00,  4.9it/s]\n")
    sys.stdout.write("{'loss': 0.5, 'epoch': 10.5}\r\nstep 61\n")
    steps = [(e["step"], e["unit"]) for e in read_events(tmp_path) if e["event"] == "step"]
    assert steps == [(5, "step"), (10, "step"), (60, "step"), (61, "step")]
