"""What corrupt-checkpoint damages on a user's script: the newest file the script saved itself
(lab.workloads.checkpoint_files.newest_saved, given the (device, inode) its torch.save and dcp.save
recorded), never a newer copy, log or file of another program's in the same folder. An imagenet-
style script copies checkpoint.pth.tar to model_best.pth.tar after saving it: the copy is newer,
and the drill once damaged it and judged a resume from the untouched checkpoint a pass."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from lab.workloads import checkpoint_files
from lab.workloads.checkpoint_files import CheckpointError


def identity(path: Path) -> list[int]:
    info = os.stat(path)
    return [info.st_dev, info.st_ino]


def later(path: Path, seconds: float) -> None:
    info = os.stat(path)
    os.utime(path, (info.st_atime + seconds, info.st_mtime + seconds))


def test_a_newer_copy_of_the_saved_checkpoint_is_passed_over_and_the_saved_one_damaged(tmp_path):
    saved = tmp_path / "checkpoint.pth.tar"
    saved.write_bytes(b"PK\x03\x04" + bytes(200))
    shutil.copyfile(saved, tmp_path / "model_best.pth.tar")
    later(tmp_path / "model_best.pth.tar", 5)
    (tmp_path / "train.log").write_text("epoch 3\n")
    later(tmp_path / "train.log", 9)
    damaged = checkpoint_files.corrupt_newest(tmp_path, "truncate", [identity(saved)])
    assert damaged == saved and saved.stat().st_size == 102
    assert (tmp_path / "model_best.pth.tar").stat().st_size == 204  # the copy untouched


def test_without_the_saves_recorded_the_newest_checkpoint_looking_file_is_damaged_as_before(tmp_path):
    saved = tmp_path / "checkpoint.pth.tar"
    saved.write_bytes(b"PK\x03\x04" + bytes(200))
    shutil.copyfile(saved, tmp_path / "model_best.pth.tar")
    later(tmp_path / "model_best.pth.tar", 5)
    assert checkpoint_files.corrupt_newest(tmp_path, "truncate") == tmp_path / "model_best.pth.tar"


def test_a_save_renamed_into_place_keeps_its_identity_and_is_the_one_damaged(tmp_path):
    tmp = tmp_path / "snapshot.pt.tmp"
    tmp.write_bytes(bytes(64))
    recorded = identity(tmp)  # recorded when torch.save returned, before the rename
    os.replace(tmp, tmp_path / "snapshot.pt")
    (tmp_path / "other.pt").write_bytes(bytes(64))  # another program's, newer
    later(tmp_path / "other.pt", 5)
    assert checkpoint_files.corrupt_newest(tmp_path, "truncate", [recorded]) == tmp_path / "snapshot.pt"


def test_in_a_saved_dcp_folder_every_file_is_the_scripts_and_the_newest_is_damaged(tmp_path):
    old, new = tmp_path / "ckpt" / "step5", tmp_path / "ckpt" / "step10"
    for folder in (old, new):
        folder.mkdir(parents=True)
        (folder / "__0_0.distcp").write_bytes(bytes(80))
        (folder / ".metadata").write_bytes(bytes(16))
    later(new / "__0_0.distcp", 5)
    (tmp_path / "ckpt" / "notes.txt").write_text("x")
    later(tmp_path / "ckpt" / "notes.txt", 9)
    damaged = checkpoint_files.corrupt_newest(tmp_path, "truncate", [identity(old), identity(new)])
    assert damaged == new / "__0_0.distcp"


def test_saves_recorded_but_none_left_below_the_folder_is_one_line(tmp_path):
    elsewhere = tmp_path / "elsewhere.pt"
    elsewhere.write_bytes(bytes(8))
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "best.pt").write_bytes(bytes(8))
    with pytest.raises(CheckpointError, match="no file your script saved in .*ckpt to corrupt"):
        checkpoint_files.corrupt_newest(tmp_path / "ckpt", "truncate", [identity(elsewhere)])


def test_the_drill_damages_among_the_files_the_scripts_events_say_it_saved():
    from lab.exercises.corrupt_checkpoint import saved_files

    events = [
        {"event": "saved", "rank": 0, "path": "checkpoint.pth.tar", "file": [2049, 17]},
        {"event": "saved", "rank": 1, "path": "checkpoint.pth.tar", "file": [2049, 17]},  # the same file
        {"event": "saved", "rank": 0, "path": "ckpt/step5", "how": "dcp.save", "file": [2049, 9]},
        {"event": "saved", "rank": 0, "path": "gone.pt"},  # removed before it could be identified
        {"event": "loaded", "rank": 0, "path": "best.pt", "file": [2049, 40]},  # loaded, not saved
    ]
    assert saved_files(events) == [[2049, 9], [2049, 17]]


def test_a_folder_not_made_yet_says_the_fault_came_before_the_first_save(tmp_path):
    with pytest.raises(
        CheckpointError, match=r"ckpt does not exist yet: nothing saved there .* fire it later: --at-step"
    ):
        checkpoint_files.corrupt_newest(tmp_path / "ckpt", "truncate")


def test_a_link_planted_to_a_saved_file_or_folder_is_never_what_is_damaged(tmp_path):
    """A job may plant links in its folder: followed, a link named like a newer checkpoint would
    carry the saved file's identity (and a linked folder a saved DCP folder's) to a path the
    damage must not go through. Only the real, older file is the script's."""
    saved = tmp_path / "ckpt" / "snapshot.pt"
    saved.parent.mkdir()
    saved.write_bytes(bytes(64))
    outside = tmp_path / "dcp_step"
    outside.mkdir()
    (outside / "__0_0.distcp").write_bytes(bytes(64))
    (saved.parent / "zz_newer.pt").symlink_to(saved)  # after "snapshot.pt" where both read alike
    (saved.parent / "linked_step").symlink_to(outside, target_is_directory=True)
    for link in (saved.parent / "zz_newer.pt", outside / "__0_0.distcp"):
        os.utime(link, (1e9 + 5, 2e9), follow_symlinks=False) if link.is_symlink() else later(link, 5)
    found = checkpoint_files.newest_saved(saved.parent, {tuple(identity(saved)), tuple(identity(outside))})
    assert found == saved
