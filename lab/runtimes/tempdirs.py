"""The lab's own directories in the system temp dir, named by the lab id.

Two things must live outside the run dir, in short paths (they hold Unix sockets, whose
paths are limited to 107 bytes): an exercise's Ray session (`tlab-ray-<id>-*`) and the
nodes' TMPDIR (`tlab-tmp-<id>`), where torchelastic and multiprocessing leave their files.
They are made 0700, and removed only when they are the caller's and not links.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from lab.errors import LabError
from lab.ownership import LAB_ID


def ray_session_prefix(lab_id: str) -> str:
    """An exercise's Ray session dir in the temp dir (short: it holds Unix sockets)."""
    return f"tlab-ray-{lab_id}-"


def temp_dir(lab_id: str) -> Path:
    """The nodes' TMPDIR."""
    return Path(tempfile.gettempdir()) / f"tlab-tmp-{lab_id}"


def make_private_dir(path: Path) -> None:
    """mkdir 0700, or accept one that is already ours: a directory, not a link, of our uid."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        info = path.lstat()
        if not path.is_dir() or path.is_symlink() or info.st_uid != os.geteuid():
            raise LabError(f"{path} exists and is not the lab's (a link, or another user's); remove it") from None


def remove_temp_dirs(lab_id: str) -> list[str]:
    """This lab's dirs in the temp dir (nodes' TMPDIR, an exercise's Ray session): ours only (uid, no link)."""
    if not LAB_ID.fullmatch(lab_id):  # the id builds these paths: "x/../elsewhere" must never reach rmtree
        raise LabError(f"refusing to remove the temp dirs of lab id {lab_id!r}: not a lab id")
    removed = []
    found = [*Path(tempfile.gettempdir()).glob(f"{ray_session_prefix(lab_id)}*"), temp_dir(lab_id)]
    for leftover in found:
        if not leftover.exists():
            continue
        info = leftover.lstat()
        if leftover.is_dir() and not leftover.is_symlink() and info.st_uid == os.geteuid():
            shutil.rmtree(leftover, ignore_errors=True)
            removed.append(f"dir {leftover}")
    return removed
