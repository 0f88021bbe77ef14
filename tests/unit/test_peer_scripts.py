"""Drills on scripts in the styles people copy, judged on runs recorded from real drills
(tests/fixtures/drills/peer-SCRIPT-DRILL, scripts/record-fixtures.sh; the scripts are
tests/user_scripts/peers/, written for these tests after public examples, none copied):

- imagenet: pytorch/examples' imagenet/main.py's way: `Epoch: [N][i/n]` lines, `--resume
  checkpoint.pth.tar`, every rank saving that one file each epoch (then copying it to
  model_best.pth.tar), loaded without a check;
- mingpt: distributed/minGPT-ddp's way: a Hydra app, its snapshot saved in place by each node's
  local rank 0 and loaded through fsspec, epochs counted from 1;
- elastic: pytorch/elastic's imagenet example's way: rank 0 saves through a temporary file and a
  rename, every rank loads, the newest state broadcast; a 30 s process-group timeout;
- fsdp2: distributed/FSDP2's way: fully_shard, DCP saves into timestamped folders every 5 steps,
  the newest folder loaded whatever it holds (drills fired at step 12, after its first save).

Each row is the truth as read from the script and the drill, written down by hand before the
runs were judged: the verdict, the first check that fails (where one should), and what the run
must show. Scripts with no process-group timeout hang for gloo's 30 minutes under hang-rank."""

from __future__ import annotations

import pytest
from drill_cases import FIXTURES

from lab.exercises.script import judge
from lab.exercises.seen import Seen

EXIT_0 = "the job finished with exit 0"
CUT = "it did not load the save the kill cut short"
RESUMES = ("kill-worker", "rank-exception", "preempt", "kill-node")


def verdict(peer: str, drill: str):
    return judge.judge(Seen.load(FIXTURES / f"peer-{peer}-{drill}" / "seen.json"))


def failed(report) -> list[str]:
    return [c.name for c in report.checks if not c.ok]


# (peer, the progress unit it prints, where a fault at the drills' step lands it: the unit it
# resumes at, the file its ranks load after a restart, the ranks that each write one file).
RESUMING = {
    "imagenet": ("epoch", 3, "checkpoint.pth.tar", [0, 1, 2, 3]),  # epochs 0-2 saved (its "epoch": 3)
    "mingpt": ("epoch", 3, "snapshot.pt", [0, 2]),  # epochs 1-2 saved; "Resuming ... at Epoch 2" is not progress
    "elastic": ("epoch", 3, "ckpt/checkpoint.pth.tar", []),  # a rename: a new file each save
    "fsdp2": ("step", 11, "checkpoints/dcp_api/", []),  # step 10's folder; DCP is one checkpoint by design
}


@pytest.mark.parametrize("drill", RESUMES)
@pytest.mark.parametrize("peer", RESUMING)
def test_a_worker_or_node_lost_or_a_preemption_resumes_from_the_last_save(peer, drill):
    unit, resumed_at, loaded, writers = RESUMING[peer]
    report = verdict(peer, drill)
    assert report.verdict == "pass", failed(report)
    progress = report.facts["progress"]
    assert progress["unit"] == unit and progress["source"] in ("output", "helper")
    assert progress["resumed_at"] == resumed_at
    assert report.facts["work_redone"]["from"] == resumed_at and report.facts["work_redone"]["count"] >= 1
    first_load = report.facts["loaded_after_fault"][0]
    assert first_load.endswith(loaded) or (loaded.endswith("/") and loaded in first_load), first_load
    assert [w["ranks"] for w in report.facts["shared_writes"]] == ([writers] if writers else [])
    if drill == "preempt":  # the job ends; the lab starts it again, as a scheduler would
        assert report.facts["rerun"] is True and report.facts["restarts"] == 0
    else:
        assert report.facts["restarts"] == 1


@pytest.mark.parametrize(
    ("peer", "cut_tail", "how", "error"),
    [
        ("imagenet", "/checkpoint.pth.tar", "torch.save", "OSError"),  # in place, and three more writers
        ("mingpt", "/snapshot.pt", "torch.save", "OSError"),  # in place; fsspec reads the half
        ("fsdp2", "/checkpoints/dcp_api/", "dcp.save", "CheckpointException"),  # a folder without .metadata
    ],
)
def test_a_save_cut_midway_is_loaded_by_scripts_that_write_in_place_or_trust_the_newest_folder(
    peer, cut_tail, how, error
):
    report = verdict(peer, "kill-in-save")
    found = report.facts["cut_save"]
    assert report.verdict == "fail" and failed(report)[0] == CUT
    assert cut_tail in found["path"] and found["how"] == how and found["took_cut"]
    assert found["error"].startswith(error)


def test_a_save_through_a_rename_is_passed_over_when_cut_and_the_job_resumes():
    report = verdict("elastic", "kill-in-save")
    found = report.facts["cut_save"]
    assert report.verdict == "pass", failed(report)
    assert found["path"].endswith("/ckpt/checkpoint.pth.tar.tmp") and found["loaded"] == "ckpt/checkpoint.pth.tar"
    assert not found["took_cut"] and report.facts["progress"]["resumed_at"] == 3


@pytest.mark.parametrize(
    ("peer", "damaged_tail"),
    [
        ("imagenet", "/checkpoint.pth.tar"),  # not model_best.pth.tar, the newer copy it never loads
        ("mingpt", "/snapshot.pt"),
        ("elastic", "/ckpt/checkpoint.pth.tar"),
        ("fsdp2", "/checkpoints/dcp_api/"),  # a file of its newest folder
    ],
)
def test_a_damaged_checkpoint_is_loaded_unchecked_and_the_job_fails_saying_so(peer, damaged_tail):
    """None of the four checks a checkpoint before it trusts it: each loads the damaged one."""
    report = verdict(peer, "corrupt-checkpoint")
    assert report.verdict == "fail" and failed(report)[0] == EXIT_0
    found = report.facts["damaged_file"]
    assert damaged_tail in found["path"] and found["took_damaged"] and found["error"]
    assert "it did not resume from the checkpoint the drill damaged" in failed(report)


@pytest.mark.parametrize("peer", ["imagenet", "mingpt", "fsdp2"])
def test_a_hung_rank_with_no_timeout_given_is_named_and_the_timeout_advised(peer):
    report = verdict(peer, "hang-rank")
    assert report.verdict == "fail" and failed(report)[0] == EXIT_0
    detail = next(c.detail for c in report.checks if c.name == EXIT_0)
    assert "its process-group timeout is 1800 s" in detail and "timeout=" in detail
    assert report.facts["forensics"]["finding"].startswith("rank 1 did not answer")


def test_a_hung_rank_in_a_script_with_a_timeout_ends_in_a_restart_and_a_resume():
    report = verdict("elastic", "hang-rank")
    assert report.verdict == "pass", failed(report)
    assert report.facts["restarts"] == 1 and report.facts["progress"]["resumed_at"] == 3
    assert report.facts["forensics"]["finding"].startswith("rank 1 did not answer")
