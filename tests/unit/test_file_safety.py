"""lab.files, attacked as a hostile script, container or local user would (issue 52, items 2-3, 5-8).

Each attack is played deterministically at the moment the attacker needs (inside the write, just
before the damage), not by a racing loop: the code must hold at that moment, not usually win."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from lab import files
from lab.workloads import checkpoint_files
from lab.workloads.checkpoint_files import CheckpointError, corrupt_newest


@pytest.fixture
def victim(tmp_path) -> Path:
    """A root 0600 file outside every folder a job writes: what an attacker wants root to damage."""
    folder = tmp_path / "host"
    folder.mkdir()
    precious = folder / "precious.pt"
    precious.write_bytes(b"k" * 1000)
    precious.chmod(0o600)
    return precious


def workdir_with_checkpoint(tmp_path: Path) -> Path:
    ckpt = tmp_path / "work" / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "snapshot.pt").write_bytes(b"s" * 1000)
    return ckpt


def test_a_checkpoint_folder_swapped_for_a_link_is_refused_and_the_victim_kept(tmp_path, victim):
    ckpt = workdir_with_checkpoint(tmp_path)
    (ckpt / "snapshot.pt").unlink()
    ckpt.rmdir()
    ckpt.symlink_to(victim.parent)  # the script's swap, just before the fire point
    with pytest.raises(CheckpointError, match="a link, never followed"):
        corrupt_newest(ckpt)
    assert victim.read_bytes() == b"k" * 1000 and stat.S_IMODE(victim.stat().st_mode) == 0o600


def test_a_link_higher_up_the_path_is_refused_too(tmp_path, victim):
    """O_NOFOLLOW on the last component alone let the host follow ./work -> elsewhere."""
    (tmp_path / "work").symlink_to(victim.parent.parent)  # work -> tmp_path: work/host is the victim's folder
    with pytest.raises(CheckpointError, match="work: a link"):
        corrupt_newest(tmp_path / "work" / "host")
    assert victim.read_bytes() == b"k" * 1000


def test_a_fifo_or_a_link_among_the_checkpoints_is_never_opened(tmp_path, victim):
    ckpt = workdir_with_checkpoint(tmp_path)
    os.mkfifo(ckpt / "zz_newest.pt")  # newer than the snapshot; opening it blocking would hang
    (ckpt / "link.pt").symlink_to(victim)
    os.utime(ckpt / "snapshot.pt", (1, 1))
    assert corrupt_newest(ckpt) == ckpt / "snapshot.pt"
    assert (ckpt / "snapshot.pt").stat().st_size == 500 and victim.read_bytes() == b"k" * 1000


def test_only_a_checkpoint_is_damaged_not_the_newest_file_of_any_kind(tmp_path):
    """A log written after the checkpoint, in the same folder (issue 56, item 2)."""
    ckpt = workdir_with_checkpoint(tmp_path)
    os.utime(ckpt / "snapshot.pt", (1, 1))
    (ckpt / "train.log").write_text("epoch 3\n" * 100)
    (ckpt / "metrics.csv").write_text("step,loss\n1,0.5\n")
    assert corrupt_newest(ckpt) == ckpt / "snapshot.pt"
    assert (ckpt / "train.log").read_text() == "epoch 3\n" * 100
    assert (ckpt / "snapshot.pt").stat().st_size == 500


def test_a_checkpoint_named_by_its_bytes_is_found_when_it_is_the_newest(tmp_path):
    ckpt = workdir_with_checkpoint(tmp_path)
    os.utime(ckpt / "snapshot.pt", (1, 1))
    (ckpt / "state").write_bytes(b"PK\x03\x04" + b"z" * 96)
    (ckpt / "notes.txt").write_text("newest, but no checkpoint")
    assert corrupt_newest(ckpt) == ckpt / "state"
    assert (ckpt / "state").stat().st_size == 50 and (ckpt / "snapshot.pt").stat().st_size == 1000


@pytest.mark.parametrize(
    ("header", "found"),
    [
        (100, True),  # safetensors: its JSON header's length, little-endian, then the header
        (1, True),
        (100 * 2**20 - 1, True),
        (0, False),  # no header: not safetensors
        (100 * 2**20, False),  # a header of 100 MiB or more: some other file's first bytes
    ],
)
def test_a_safetensors_file_is_known_by_its_header_length(tmp_path, header, found):
    ckpt = workdir_with_checkpoint(tmp_path)
    os.utime(ckpt / "snapshot.pt", (1, 1))
    (ckpt / "weights").write_bytes(header.to_bytes(8, "little") + b'{"w": {}}' + b"\0" * 91)
    assert corrupt_newest(ckpt) == ckpt / ("weights" if found else "snapshot.pt")


def test_flip_inverts_every_97th_byte_of_the_second_half_across_chunks(tmp_path):
    data = bytes(range(256)) * 40  # 10240 bytes
    path = tmp_path / "step_00000001.ckpt"
    path.write_bytes(data)
    with open(path, "r+b") as f:
        checkpoint_files._flip_second_half(f, len(data), chunk=1000)  # chunks that do not align with 97
    after = path.read_bytes()
    changed = [i for i, (a, b) in enumerate(zip(data, after, strict=True)) if a != b]
    assert changed == list(range(5120, 10240, 97))
    assert all(after[i] == data[i] ^ 0xFF for i in changed)  # inverted, not overwritten


def test_a_report_temp_file_swapped_for_a_link_mid_write_is_not_written_through(tmp_path, victim):
    """The attacker sees the temp file appear beside the report and swaps it for a link."""
    reports = tmp_path / "reports"
    reports.mkdir()

    def write(f):
        f.write(b"first half ")
        (tmp,) = [p for p in reports.iterdir() if p.name.startswith(".report.json.")]
        tmp.unlink()
        tmp.symlink_to(victim)  # what a 1 ms polling loop did 556 times in one drill
        f.write(b"second half")

    files.replace_with(reports / "report.json", write)
    assert victim.read_bytes() == b"k" * 1000 and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not any(p.name.startswith(".report.json.") and not p.is_symlink() for p in reports.iterdir())


def test_reads_never_follow_a_link_hang_on_a_fifo_or_read_past_their_bound(tmp_path, victim):
    events = tmp_path / "events"
    events.mkdir()
    (events / "rank0.jsonl").symlink_to(victim)
    os.mkfifo(events / "rank1.jsonl")
    with open(events / "rank2.jsonl", "wb") as f:
        f.truncate(2 * 1024**3)  # sparse
    (tmp_path / "linked").symlink_to(events)
    done: list = []
    reader = threading.Thread(
        target=lambda: done.extend(
            [
                files.read_regular(events / "rank0.jsonl"),
                files.read_regular(events / "rank1.jsonl"),
                files.read_regular(tmp_path / "linked" / "rank2.jsonl", 100, tail=True),
                len(files.read_regular(events / "rank2.jsonl", 100, tail=True) or b""),
                files.read_regular(events / "rank2.jsonl", 100),
            ]
        ),
        daemon=True,
    )
    reader.start()
    reader.join(30)
    assert done == [None, None, None, 100, None]


def test_regular_files_lists_nothing_through_a_link(tmp_path, victim):
    top = tmp_path / "top"
    (top / "inner").mkdir(parents=True)
    (top / "inner" / "a.pt").write_bytes(b"a")
    (top / "out").symlink_to(victim.parent)
    (top / "f.pt").symlink_to(victim)
    assert [str(rel) for _, rel in files.regular_files(top)] == ["inner/a.pt"]
    assert list(files.regular_files(tmp_path / "top" / "out")) == []


def test_write_beneath_makes_its_folders_under_root_whatever_the_working_dir(tmp_path, monkeypatch):
    """Killed mutants of lab.files.write_beneath (docs/mutation.md): a folder made relative to the
    working dir instead of beneath root, a file written elsewhere, a mode other than 0644."""
    root, elsewhere = tmp_path / "node0", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    written = files.write_beneath(root, "forensics/rank1/stack.txt", "frames")
    assert written == root / "forensics" / "rank1" / "stack.txt" and written.read_text() == "frames"
    assert stat.S_IMODE(written.stat().st_mode) == 0o644 and list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in (root / "forensics" / "rank1").iterdir()) == ["stack.txt"]  # no temp left
    files.write_beneath(root, "forensics/rank1/stack.txt", "again")  # the folders exist now: written over
    assert written.read_text() == "again"


def test_write_beneath_refuses_a_root_or_folder_that_is_a_file_or_a_link(tmp_path, victim):
    root = tmp_path / "node0"
    root.write_text("not a folder")
    with pytest.raises(files.UnsafePath, match="not a folder, never followed"):
        files.write_beneath(root, "events.jsonl", "x")
    folder_root = tmp_path / "node1"
    folder_root.mkdir()
    (folder_root / "events").symlink_to(victim.parent)  # a folder swapped for a link by the node
    with pytest.raises(files.UnsafePath, match="a link, never followed"):
        files.write_beneath(folder_root, "events/precious.pt", "overwritten")
    assert victim.read_bytes() == b"k" * 1000


def test_write_beneath_replaces_a_link_at_the_name_instead_of_writing_through_it(tmp_path, victim):
    root = tmp_path / "node0"
    root.mkdir()
    (root / "exit").symlink_to(victim)
    files.write_beneath(root, "exit", "0")
    assert not (root / "exit").is_symlink() and (root / "exit").read_text() == "0"
    assert victim.read_bytes() == b"k" * 1000
