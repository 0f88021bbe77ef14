"""Writing the files the lab hands back to the user (reports, pictures, results) safely.

They go to directories the user names (--report-dir, --out), as root perhaps: each file is
written to a new temp file beside it and renamed over its name, so a link planted at that
name is replaced, never followed, and a reader never sees half a file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from lab.errors import LabError


def replace_with(path: Path, write: Callable[[str], None]) -> None:
    """write(temp_path) fills a fresh file beside path; then it takes path's place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    replace_with(path, lambda tmp: None if Path(tmp).write_text(text) else None)


def write_beneath(root: Path, relative: str, text: str) -> Path:
    """Write root/relative (made atomically, mode 0644) without following a link anywhere below
    root: for the folders a container or a node can write into (a node's dir, the events), where
    a planted link would otherwise make the lab, as root, create or overwrite a file elsewhere."""
    *folders, name = Path(relative).parts
    fd = _open_folder(root, None)
    try:
        for folder in folders:
            try:
                os.mkdir(folder, 0o777, dir_fd=fd)  # as mkdir(1) would: the umask decides
            except FileExistsError:
                pass
            inner = _open_folder(Path(folder), fd, root)
            os.close(fd)
            fd = inner
        tmp = f".{name}.{os.getpid()}.tmp"
        try:
            os.unlink(tmp, dir_fd=fd)
        except FileNotFoundError:
            pass
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        with os.fdopen(out, "w") as f:
            f.write(text)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)  # a link at `name` is replaced, not followed
    finally:
        os.close(fd)
    return root / relative


def _open_folder(path: Path, dir_fd: int | None, root: Path | None = None) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as e:
        where = root / path if root else path
        raise LabError(f"{where}: {e.strerror} (a link planted there is never followed)") from None


def read_regular(path: Path, limit: int | None = None, *, tail: bool = False, owner: int | None = None) -> bytes | None:
    """A plain file's bytes, never read through a link (a node or another user may plant one).
    None when it is not a regular file (of uid `owner`, when given), or when it is larger than
    `limit`; with tail, its last `limit` bytes instead."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or (owner is not None and info.st_uid != owner):
            return None
        if limit is not None and info.st_size > limit:
            if not tail:
                return None
            f.seek(info.st_size - limit)
        return f.read()
