"""lab.files at its edges, on real files: a file exactly at the limit, the head or the tail of a
longer one, a file of another uid, the mode a new file or folder gets, the temp file a replace
writes, and a stale temp file from an earlier write. Written where mutation testing showed edges
no test reached (docs/mutation.md); the attacks are in test_file_safety.py."""

from __future__ import annotations

import os
import stat

import pytest

from lab import files

NOBODY = 65534


def test_a_file_is_read_whole_up_to_the_limit_and_its_head_or_tail_past_it(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"abcdef")
    assert files.read_regular(path, 6) == b"abcdef"  # exactly the limit
    assert files.read_regular(path, 5) is None
    assert files.read_regular(path, 3, tail=True) == b"def"
    assert files.read_text(path, 3) is None
    assert files.read_text(path, 3, tail=True) == "def"
    assert files.read_text(path, 6) == "abcdef"


def test_a_file_of_another_uid_is_not_read_as_its_owners(tmp_path):
    path = tmp_path / "mark"
    path.write_bytes(b"x")
    assert files.read_regular(path, owner=NOBODY) is None
    assert files.read_regular(path, owner=os.geteuid()) == b"x"
    os.chown(path, NOBODY, -1)
    assert files.read_regular(path, owner=NOBODY) == b"x"


def test_new_files_and_folders_get_the_usual_modes(tmp_path):
    old = os.umask(0o022)
    try:
        os.close(files.open_nofollow(tmp_path / "new", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o644
        files.write_beneath(tmp_path, "a/b/out.txt", "hi")
        assert stat.S_IMODE(os.stat(tmp_path / "a" / "b").st_mode) == 0o755
        assert stat.S_IMODE(os.stat(tmp_path / "a" / "b" / "out.txt").st_mode) == 0o644
    finally:
        os.umask(old)


def test_a_stale_temp_file_of_an_earlier_write_is_replaced(tmp_path):
    (tmp_path / f".out.txt.{os.getpid()}.tmp").write_text("left by a write that died")
    files.write_beneath(tmp_path, "out.txt", "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    assert (tmp_path / "out.txt").read_text() == "new"


def test_a_replace_writes_beside_the_file_under_its_suffix_and_cleans_up_when_the_write_fails(tmp_path):
    path = tmp_path / "report.json"
    during = []

    def write(f):
        during.extend(p.name for p in tmp_path.iterdir())
        f.write(b"{}")

    files.replace_with(path, write)
    assert len(during) == 1 and during[0].startswith(".report.json.") and during[0].endswith(".json")
    assert path.read_bytes() == b"{}" and stat.S_IMODE(path.stat().st_mode) == 0o644  # readable, not executable

    def fail(f):
        raise KeyError("the writer failed")

    with pytest.raises(KeyError):
        files.replace_with(path, fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"] and path.read_bytes() == b"{}"
