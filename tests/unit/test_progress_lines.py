"""Which lines of a script's output are progress (lab.node.progress_lines), read as the watcher
reads them: the default pattern's forms, what is no count, a tqdm bar's count, and each redraw
after a carriage return a line. No process runs."""

from __future__ import annotations

import re

import pytest

from lab.node.user_script import DEFAULT_REGEX, progress_value


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
