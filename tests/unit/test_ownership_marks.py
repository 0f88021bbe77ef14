"""The run dir's mark (lab.ownership) function by function, on real files: what a mark must
hold, how it is read and written, how a run dir appears with its mark already inside, and the
rename that never replaces. Written where mutation testing showed words and flags no test
checked (docs/mutation.md); the attacks on the whole CLI are in tests/test_run_dir_attacks.py."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from lab import ownership
from lab.errors import LabError
from lab.ownership import MARK_FILE, Mark

NOBODY = 65534
PICK = ownership.PICK_ANOTHER
BAD = "run dir /r: its .torchrun-lab is not a mark the lab wrote"


def parse(body) -> Mark:
    return ownership.parse_mark(json.dumps(body).encode(), Path("/r"))


def refusal(call) -> str:
    with pytest.raises(LabError) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"{", "(not JSON); the lab leaves it alone, pick another --run-dir"),
        (b"[1]", "(not an object); pick another --run-dir"),
        (b'{"uid": true, "lab_id": "abcde"}', "(no uid); pick another --run-dir"),
        (b'{"uid": "0", "lab_id": "abcde"}', "(no uid); pick another --run-dir"),
        (
            b'{"uid": 0, "lab_id": "abcde", "dir": [1, 2, 3]}',
            "(its directory field is malformed); pick another --run-dir",
        ),
        (b'{"uid": 0, "lab_id": "abcde", "dir": []}', "(its directory field is malformed); pick another --run-dir"),
        (
            b'{"uid": 0, "lab_id": "abcde", "dir": [1, "2"]}',
            "(its directory field is malformed); pick another --run-dir",
        ),
    ],
)
def test_a_mark_the_lab_did_not_write_is_refused_saying_why(raw, why):
    assert refusal(lambda: ownership.parse_mark(raw, Path("/r"))) == f"{BAD} {why}"


def test_a_long_lab_id_is_quoted_cut_to_forty_characters():
    said = refusal(lambda: parse({"uid": 0, "lab_id": "f" * 50}))
    assert said == f"{BAD} (lab id {'f' * 40!r} is not five hex digits); pick another --run-dir"


def test_a_mark_holds_its_uid_its_lab_id_and_the_directory_it_names():
    assert parse({"uid": 1000, "lab_id": "0a1b2"}) == Mark(1000, "0a1b2", None)
    assert parse({"uid": 1000, "lab_id": "0a1b2", "dir": [64, 9]}) == Mark(1000, "0a1b2", (64, 9))
    assert ownership.LAB_ID.fullmatch(ownership.new_lab_id())


def test_a_mark_is_written_once_private_and_read_back(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        mark = ownership.write_mark(fd, "abcde")
        here = os.stat(tmp_path)
        assert mark == Mark(os.geteuid(), "abcde", (here.st_dev, here.st_ino))
        assert stat.S_IMODE(os.stat(tmp_path / MARK_FILE).st_mode) == 0o600
        assert ownership.read_mark(fd, tmp_path) == mark
        with pytest.raises(FileExistsError):
            ownership.write_mark(fd, "bcdef")  # never over a mark already there
        (tmp_path / MARK_FILE).unlink()
        (tmp_path / "elsewhere").write_text("{}")
        (tmp_path / MARK_FILE).symlink_to(tmp_path / "elsewhere")
        with pytest.raises(FileExistsError):
            ownership.write_mark(fd, "bcdef")  # nor through a link planted in its place
        assert refusal(lambda: ownership.read_mark(fd, tmp_path)) == (
            f"run dir {tmp_path}: its {MARK_FILE} cannot be read (Too many levels of symbolic links); "
            "pick another --run-dir"
        )
    finally:
        os.close(fd)


def test_a_run_dir_appears_with_its_mark_made_beside_it(tmp_path, monkeypatch):
    renamed = []
    real = ownership.rename_noreplace
    monkeypatch.setattr(ownership, "rename_noreplace", lambda src, dst: (renamed.append(src), real(src, dst)))
    path = tmp_path / "a" / "b" / "run"
    assert ownership.create_marked(path, "abcde") is True
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700 == stat.S_IMODE(os.stat(path).st_mode)
    assert renamed[0].parent == path.parent and renamed[0].name.startswith(".run.new-")
    assert json.loads((path / MARK_FILE).read_text())["lab_id"] == "abcde"
    assert ownership.create_marked(path, "bcdef") is False  # another command made it first
    assert sorted(p.name for p in path.parent.iterdir()) == ["run"]  # its staging dir gone
    assert json.loads((path / MARK_FILE).read_text())["lab_id"] == "abcde"


def test_the_rename_moves_but_never_replaces(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative names: resolved from the working directory (AT_FDCWD)
    Path("src").mkdir()
    ownership.rename_noreplace(Path("src"), Path("dst"))
    assert Path("dst").is_dir() and not Path("src").exists()
    Path("src").mkdir()
    Path("empty").mkdir()
    with pytest.raises(FileExistsError) as caught:
        ownership.rename_noreplace(Path("src"), Path("empty"))
    assert (caught.value.errno, caught.value.strerror, caught.value.filename) == (errno.EEXIST, "File exists", "empty")
    assert Path("src").is_dir() and Path("empty").is_dir()
    assert refusal(lambda: ownership.rename_noreplace(Path("missing"), Path("new"))) == (
        "run dir new: cannot be created (No such file or directory)"
    )


def test_only_an_older_labs_reports_are_adopted_and_it_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert refusal(lambda: ownership.adopt_older_labs(fd, run)) == (
            f"run dir {run} exists and is empty, but the lab did not make it; the lab makes its own run dir: "
            f"`rmdir {run}` or pick another --run-dir"
        )
        (run / "notes.txt").write_text("mine")
        said = f"run dir {run} holds files the lab did not make (no {MARK_FILE} mark); pick another --run-dir"
        assert refusal(lambda: ownership.adopt_older_labs(fd, run)) == said
        (run / "notes.txt").unlink()
        (run / "reports").mkdir()
        mark = ownership.adopt_older_labs(fd, run)
        assert ownership.read_mark(fd, run) == mark and stat.S_IMODE(os.stat(run).st_mode) == 0o700
    finally:
        os.close(fd)
    assert capsys.readouterr().err == (
        f"note: run dir {run} was left by an older lab without a mark (reports); it is marked as the lab's now "
        "(mode 0700), its reports kept\n"
    )


def read(run: Path) -> Mark | None:
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return ownership.read_mark(fd, run)
    finally:
        os.close(fd)


def test_a_mark_is_a_small_regular_file_of_yours_that_only_you_can_write(tmp_path):
    mark = tmp_path / MARK_FILE
    mark.write_bytes(b" " * (ownership.MAX_MARK_BYTES - 26) + b'{"uid":0,"lab_id":"abcde"}')
    assert read(tmp_path) == Mark(0, "abcde", None)  # exactly the limit: read whole
    mark.write_bytes(b" " + mark.read_bytes())
    size = ownership.MAX_MARK_BYTES + 1
    assert refusal(lambda: read(tmp_path)) == f"run dir {tmp_path}: its {MARK_FILE} is {size} bytes, not a mark; {PICK}"
    mark.write_text('{"uid": 0, "lab_id": "abcde"}')
    mark.chmod(0o601)  # others may run it, not write it
    assert read(tmp_path) == Mark(0, "abcde", None)
    owned_or_open = f"run dir {tmp_path}: its {MARK_FILE} belongs to uid {{}} or others can write it; {PICK}"
    mark.chmod(0o620)
    assert refusal(lambda: read(tmp_path)) == owned_or_open.format(os.geteuid())
    mark.chmod(0o600)
    os.chown(mark, NOBODY, -1)
    assert refusal(lambda: read(tmp_path)) == owned_or_open.format(NOBODY)
    mark.unlink()
    mark.write_text(json.dumps({"uid": NOBODY, "lab_id": "abcde"}))
    assert refusal(lambda: read(tmp_path)) == f"run dir {tmp_path} was made by uid {NOBODY}, not by you; {PICK}"


def test_a_fifo_in_the_marks_place_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / MARK_FILE)
    said = []
    reader = threading.Thread(target=lambda: said.append(refusal(lambda: read(tmp_path))))
    reader.start()
    reader.join(30)
    returned = not reader.is_alive()
    if not returned:  # blocked in open(2): a writer frees it, so the test ends either way
        os.close(os.open(tmp_path / MARK_FILE, os.O_WRONLY | os.O_NONBLOCK))
        reader.join()
    assert returned and said == [f"run dir {tmp_path}: its {MARK_FILE} is not a regular file; {PICK}"]


def test_a_run_dir_is_opened_as_itself_never_through_a_link(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    (tmp_path / "file").write_text("")
    for path in (tmp_path / "link", tmp_path / "file"):  # O_DIRECTORY with O_NOFOLLOW: a link is no directory
        assert refusal(lambda path=path: ownership.open_dir(path)) == f"run dir {path}: Not a directory"
    os.close(ownership.open_dir(tmp_path / "dir"))


def test_a_run_dir_must_be_a_directory_of_yours(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    (tmp_path / "file").write_text("")
    assert refusal(lambda: ownership.check_dir(os.lstat(tmp_path / "link"), Path("/r"))) == (
        f"run dir /r is a symlink; the lab never follows one it did not make ({PICK})"
    )
    assert refusal(lambda: ownership.check_dir(os.lstat(tmp_path / "file"), Path("/r"))) == (
        f"run dir /r exists and is not a directory ({PICK})"
    )
    os.chown(tmp_path / "dir", NOBODY, -1)
    assert refusal(lambda: ownership.check_dir(os.lstat(tmp_path / "dir"), Path("/r"))) == (
        f"run dir /r belongs to uid {NOBODY}, not to you (uid {os.geteuid()}); {PICK}"
    )


@pytest.mark.parametrize(
    ("owner", "mode", "who"), [(1, 0o755, "uid 1"), (0, 0o777, "other users"), (0, 0o775, "other users")]
)
def test_a_directory_above_the_run_dir_that_others_can_change_is_named(tmp_path, owner, mode, who):
    """A parent that does not exist yet is passed over (claim makes it, as ours); the ones above
    it are still checked."""
    above = tmp_path / "above"
    above.mkdir()
    os.chown(above, owner, -1)
    above.chmod(mode)
    run = above / "missing" / "run"
    assert refusal(lambda: ownership.check_parents(run)) == (
        f"run dir {run} sits in {above}, which {who} can change: they could swap the run dir while the lab works on "
        f"it; {PICK} under a directory only you (or root) can write"
    )
    above.chmod(mode | stat.S_ISVTX)  # sticky, like /tmp: others cannot rename what is not theirs
    if owner == 0:
        ownership.check_parents(run)


def test_a_run_dir_beneath_a_file_is_refused_naming_the_file(tmp_path):
    (tmp_path / "file").write_text("")
    run = tmp_path / "file" / "below" / "run"
    assert (
        refusal(lambda: ownership.check_parents(run))
        == f"run dir {run}: {tmp_path / 'file' / 'below'}: Not a directory"
    )
