"""Drills on the kinds of script people write, judged on runs recorded from real drills
(tests/fixtures/drills/kind-KIND-DRILL, scripts/record-fixtures.sh): every drill that takes
--script, on tests/user_scripts/snapshot_every_epoch.py run as each kind (its flags):

- rank0: only rank 0 prints its progress;
- sparse: a snapshot before the first epoch and every 10 (killed at epoch 3, it redoes 0-2);
- config: it reads lab_config.json where it starts (not in the drill's fresh working dir);
- crash: rank 0 raises at epoch 1, once, before the fault's epoch 3;
- argparse: `--epochs eight`.

Each kind's verdict is the one a careful engineer gives after reading the logs, in the
script's own words when it failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.exercises.script import judge
from lab.exercises.seen import Seen

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"
DRILLS = ("kill-worker", "kill-node", "hang-rank", "partition-node", "straggler", "preempt", "corrupt-checkpoint")


def verdict(kind: str, drill: str):
    return judge.judge(Seen.load(FIXTURES / f"kind-{kind}-{drill}" / "seen.json"))


def failed(report) -> list[tuple[str, str]]:
    return [(c.name, c.detail) for c in report.checks if not c.ok]


@pytest.mark.parametrize("drill", DRILLS)
def test_progress_printed_by_rank_0_alone_still_fires_the_fault_and_is_read(drill):
    report = verdict("rank0", drill)
    assert report.facts["progress"]["source"] == "output", report.facts["progress"]
    assert report.facts["progress"]["fired_at"]["rank"] == 0
    assert not [c for c in failed(report) if c[0] == "the fault fired while the job ran"]
    if drill != "corrupt-checkpoint":  # its damaged snapshot crashes the script: a fair failure
        assert report.verdict == "pass", failed(report)


@pytest.mark.parametrize("drill", ["kill-worker", "kill-node", "hang-rank", "partition-node", "preempt"])
def test_a_sparse_snapshot_reloaded_is_a_resume_not_an_accusation(drill):
    report = verdict("sparse", drill)
    assert report.verdict == "pass", failed(report)
    assert report.facts["newest_checkpoint_before_fault"] is not None
    assert report.facts["work_redone"]["from"] == 0  # from its one snapshot, before epoch 0


@pytest.mark.parametrize("drill", DRILLS)
def test_a_file_read_where_it_starts_is_reported_with_where_that_was_and_the_flag(drill):
    (first, *_) = failed(verdict("config", drill))
    assert "FileNotFoundError" in first[1] and "lab_config.json" in first[1], first
    assert "--workdir DIR runs it where its files are" in first[1]


@pytest.mark.parametrize("drill", DRILLS)
def test_a_crash_before_the_fault_is_judged_as_that_in_its_own_words(drill):
    (first, *_) = failed(verdict("crash", drill))
    assert "the script failed before the fault" in first[1], first
    assert "RuntimeError: a bug at epoch 1, on the first try only" in first[1]


@pytest.mark.parametrize("drill", DRILLS)
def test_an_argparse_error_is_quoted(drill):
    (first, *_) = failed(verdict("argparse", drill))
    assert "exit status 2" in first[1] and "invalid int value: 'eight'" in first[1], first
