"""The files and folders a user names for the lab's output, checked before anything runs.

--report-dir, --junit, --summary, `lab bench docs --output`: the lab (root, often) writes there,
and the folder may be another user's (`./lab-ci-report` in a checkout someone else can write).
Such a user could plant a link at the name or swap a temp file mid-write. So, as the run dir
already is (lab.ownership), an output path is refused in one line when:

- it is empty (the flag was given no value);
- it is a link (never followed), or is there and is not a regular file (a folder, for a dir);
- the folder it sits in (or, for a folder still to make, the nearest one that exists) is
  another user's, or writable by others and not sticky;
- this user may not write there.

Then files go in through lab.files (a descriptor, a rename): what is checked stays true.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lab import files
from lab.errors import LabError


def output_file(value: str | None, flag: str, *, make_folder: bool = False) -> Path | None:
    """A file the lab will (re)write or append to: None when the flag was not given. Its folder
    must exist, unless make_folder (then the nearest folder that exists is the one checked)."""
    if value is None:
        return None
    path = _named(value, flag)
    if _existing_kind(path, flag) not in (None, stat.S_IFREG):
        raise LabError(f"{flag} {path} is not a regular file; the lab replaces only files (give a file path)")
    folder = path.parent
    if not folder.is_dir() and not make_folder:
        raise LabError(f"{flag} {path}: the folder {folder} does not exist: make it first, or choose another path")
    _safe_folder(_existing(folder, flag, path), flag, path)
    return path


def output_dir(value: str | None, flag: str) -> Path | None:
    """A folder the lab will make (if need be) and write files into."""
    if value is None:
        return None
    path = _named(value, flag)
    kind = _existing_kind(path, flag)
    if kind not in (None, stat.S_IFDIR):
        raise LabError(f"{flag} {path} exists and is not a folder")
    if kind is not None:
        _safe_folder(path, flag, path)
    _safe_folder(_existing(path.parent, flag, path), flag, path)
    return path


def _existing(folder: Path, flag: str, path: Path) -> Path:
    """The nearest folder that exists, where one will be made: the one that must be safe."""
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if folder.is_symlink():
        raise LabError(f"{flag} {path}: {folder} is a link; the lab never writes through one (give the real path)")
    if not folder.is_dir():
        raise LabError(f"{flag} {path}: {folder} is not a folder")
    return folder


def append_text(path: Path, text: str) -> None:
    """Append to a file (a CI's job summary) through a descriptor reached through no link."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    with os.fdopen(files.open_nofollow(path, flags, 0o644), "a") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise LabError(f"{path} is not a regular file: nothing appended")
        f.write(text)


def _existing_kind(path: Path, flag: str) -> int | None:
    """The file type (stat.S_IFMT) of what is at path now, None when nothing is; a link is refused."""
    if not os.path.lexists(path):
        return None
    kind = stat.S_IFMT(os.lstat(path).st_mode)
    if kind == stat.S_IFLNK:
        raise LabError(f"{flag} {path} is a link; the lab never writes through one (give the real path)")
    return kind


def _named(value: str, flag: str) -> Path:
    if not value.strip():
        raise LabError(f"{flag} is empty: give a path")
    if "\x00" in value:
        raise LabError(f"{flag} holds a NUL byte: give a path")
    return Path(os.path.abspath(value))


def _safe_folder(folder: Path, flag: str, path: Path) -> None:
    """Only root and this user can change the folder (or it is sticky, like /tmp), and this user may write there."""
    try:
        info = os.stat(folder)
    except OSError as e:
        raise LabError(f"{flag} {path}: {folder}: {e.strerror}") from None
    me = os.geteuid()
    others_write = info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX
    if info.st_uid not in (0, me) or others_write:
        who = f"uid {info.st_uid}" if info.st_uid not in (0, me) else "other users"
        raise LabError(
            f"{flag} {path} sits in {folder}, which {who} can change: they could swap what the lab writes "
            "for a link; choose a folder only you (or root) can write"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise LabError(f"cannot write in {folder} ({flag} {path}): permission denied")
