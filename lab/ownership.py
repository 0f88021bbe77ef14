"""The proof that a run dir is the lab's: its mark, checked as a hostile user would attack it.

The lab runs as root and deletes what it made, so what it reads as "mine" must be
something no one else could have written or swapped (threat model: docs/reliability.md):

- the run dir is a real directory (never a link) of the caller's uid, mode 0700;
- every directory above it is root's or the caller's and writable by no one else (or
  sticky, like /tmp): nobody else can rename the run dir away and plant another between
  the lab's check and its removal;
- the mark `.torchrun-lab` is a small regular file of the caller's, read without
  following a link or blocking on a FIFO, whose lab id is five hex digits (the id builds
  paths and name prefixes) and which names the one directory it was written in (device
  and inode): a copy (`cp -a`) carries the original's mark and is refused.

A new run dir appears with its mark already inside (made under a temporary name beside
it and renamed into place without replacing anything), so two commands that start at the
same moment never see a marked-less directory of the lab's.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import secrets
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError

MARK_FILE = ".torchrun-lab"
LAB_ID = re.compile(r"[0-9a-f]{5}")
MAX_MARK_BYTES = 4096
PICK_ANOTHER = "pick another --run-dir"
REPORTS_DIR = "reports"  # what `lab down` keeps: a run dir holding only this may be an older lab's


@dataclass(frozen=True)
class Mark:
    uid: int
    lab_id: str
    dir: tuple[int, int] | None  # (st_dev, st_ino) of the run dir it names; None: an older lab's mark

    def to_json(self) -> bytes:
        return json.dumps({"uid": self.uid, "lab_id": self.lab_id, "dir": list(self.dir or ())}).encode()


def new_lab_id() -> str:
    """Five hex digits: short enough for Linux's 15-character interface names."""
    return secrets.token_hex(3)[:5]


def parse_mark(raw: bytes, where: Path) -> Mark:
    """The mark's fields, or one line saying why it is not one the lab wrote."""
    bad = f"run dir {where}: its {MARK_FILE} is not a mark the lab wrote"
    try:
        body = json.loads(raw)
    except ValueError:
        raise LabError(f"{bad} (not JSON); the lab leaves it alone, {PICK_ANOTHER}") from None
    if not isinstance(body, dict):
        raise LabError(f"{bad} (not an object); {PICK_ANOTHER}")
    uid, lab_id, named = body.get("uid"), body.get("lab_id"), body.get("dir")
    if not isinstance(uid, int) or isinstance(uid, bool):
        raise LabError(f"{bad} (no uid); {PICK_ANOTHER}")
    if not isinstance(lab_id, str) or not LAB_ID.fullmatch(lab_id):
        raise LabError(f"{bad} (lab id {str(lab_id)[:40]!r} is not five hex digits); {PICK_ANOTHER}")
    if named is None:
        return Mark(uid, lab_id, None)
    if not (isinstance(named, list) and len(named) == 2 and all(type(n) is int for n in named)):
        raise LabError(f"{bad} (its directory field is malformed); {PICK_ANOTHER}")
    return Mark(uid, lab_id, (named[0], named[1]))


def read_mark(dir_fd: int, where: Path) -> Mark | None:
    """The mark inside the directory open at dir_fd, checked; None when there is none."""
    try:
        fd = os.open(MARK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP: a link in the mark's place
        raise LabError(f"run dir {where}: its {MARK_FILE} cannot be read ({e.strerror}); {PICK_ANOTHER}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LabError(f"run dir {where}: its {MARK_FILE} is not a regular file; {PICK_ANOTHER}")
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise LabError(
                f"run dir {where}: its {MARK_FILE} belongs to uid {info.st_uid} or others can write it; {PICK_ANOTHER}"
            )
        if info.st_size > MAX_MARK_BYTES:
            raise LabError(f"run dir {where}: its {MARK_FILE} is {info.st_size} bytes, not a mark; {PICK_ANOTHER}")
        raw = os.read(fd, MAX_MARK_BYTES + 1)
    finally:
        os.close(fd)
    mark = parse_mark(raw, where)
    if mark.uid != os.geteuid():
        raise LabError(f"run dir {where} was made by uid {mark.uid}, not by you; {PICK_ANOTHER}")
    here = os.fstat(dir_fd)
    if mark.dir is not None and mark.dir != (here.st_dev, here.st_ino):
        raise LabError(
            f"run dir {where} carries the mark of another directory (a copy, `cp -a`?): the lab would act on that "
            f"directory's lab; keep the copy's files, but {PICK_ANOTHER} to run a lab"
        )
    return mark


def write_mark(dir_fd: int, lab_id: str) -> Mark:
    here = os.fstat(dir_fd)
    mark = Mark(os.geteuid(), lab_id, (here.st_dev, here.st_ino))
    fd = os.open(MARK_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as f:
        f.write(mark.to_json())
    return mark


def open_dir(path: Path) -> int:
    """An fd on the directory itself, never through a link (ELOOP/ENOTDIR become one line)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise LabError(f"run dir {path}: {e.strerror}") from None


def check_dir(info: os.stat_result, path: Path) -> None:
    """The run dir itself: a directory (not a link) of ours that no one else may enter."""
    if stat.S_ISLNK(info.st_mode):
        raise LabError(f"run dir {path} is a symlink; the lab never follows one it did not make ({PICK_ANOTHER})")
    if not stat.S_ISDIR(info.st_mode):
        raise LabError(f"run dir {path} exists and is not a directory ({PICK_ANOTHER})")
    if info.st_uid != os.geteuid():
        raise LabError(f"run dir {path} belongs to uid {info.st_uid}, not to you (uid {os.geteuid()}); {PICK_ANOTHER}")


def check_private(info: os.stat_result, path: Path) -> None:
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise LabError(
            f"run dir {path} is open to other users (mode {mode:o}); the lab keeps its run dir 0700: "
            f"`chmod 700 {path}` or {PICK_ANOTHER}"
        )


def check_parents(path: Path) -> None:
    """No one but root and the caller can rename entries in any directory above the run dir."""
    me = os.geteuid()
    for parent in path.parents:
        try:
            info = os.lstat(parent)
        except FileNotFoundError:
            continue  # made by claim, as ours
        except OSError as e:
            raise LabError(f"run dir {path}: {parent}: {e.strerror}") from None
        writable_by_others = info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX
        if info.st_uid not in (0, me) or writable_by_others:
            who = f"uid {info.st_uid}" if info.st_uid not in (0, me) else "other users"
            raise LabError(
                f"run dir {path} sits in {parent}, which {who} can change: they could swap the run dir while the "
                f"lab works on it; {PICK_ANOTHER} under a directory only you (or root) can write"
            )


def create_marked(path: Path, lab_id: str) -> bool:
    """Make path (0700) with its mark already inside; False when something else made it first."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.new-", dir=path.parent))
    try:
        fd = open_dir(staging)
        try:
            write_mark(fd, lab_id)
        finally:
            os.close(fd)
        try:
            rename_noreplace(staging, path)
            return True
        except FileExistsError:
            return False
    finally:
        if staging.exists():
            (staging / MARK_FILE).unlink(missing_ok=True)
            staging.rmdir()


_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def rename_noreplace(src: Path, dst: Path) -> None:
    """rename(2) that never replaces dst (not even an empty directory: that one is someone's)."""
    libc = ctypes.CDLL(None, use_errno=True)
    done = libc.renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
    if done == 0:
        return
    err = ctypes.get_errno()
    if err in (17, 39):  # EEXIST, ENOTEMPTY
        raise FileExistsError(err, os.strerror(err), str(dst))
    raise LabError(f"run dir {dst}: cannot be created ({os.strerror(err)})")


def older_labs_layout(names: list[str]) -> bool:
    """An unmarked dir an older lab left (its lessons wrote reports after removing the mark),
    or an empty one. Nothing here is ever deleted: `lab down` keeps reports."""
    return set(names) <= {REPORTS_DIR}


def adopt_older_labs(fd: int, path: Path) -> Mark:
    """A run dir of ours without a mark: an older lab's (it wrote reports before its mark) is
    marked and made private, saying so; an empty one is someone's, refused."""
    names = os.listdir(fd)
    if not names:
        raise LabError(
            f"run dir {path} exists and is empty, but the lab did not make it; the lab makes its own run dir: "
            f"`rmdir {path}` or {PICK_ANOTHER}"
        )
    if not older_labs_layout(names) or stat.S_IMODE(os.fstat(fd).st_mode) & 0o022:
        raise LabError(f"run dir {path} holds files the lab did not make (no {MARK_FILE} mark); {PICK_ANOTHER}")
    os.fchmod(fd, 0o700)
    mark = write_mark(fd, new_lab_id())
    print(
        f"note: run dir {path} was left by an older lab without a mark ({', '.join(sorted(names))}); "
        "it is marked as the lab's now (mode 0700), its reports kept",
        file=sys.stderr,
    )
    return mark
