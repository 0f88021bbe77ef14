"""The one way the lab touches a file that a node, a container, a script or another user can write.

The lab often runs as root; the folders it reads and writes are not all its own. A node's dir,
the events, a script's working dir and checkpoints are written by the job (a container's root,
a hostile script); a --report-dir or `./lab-ci-report` may sit in another user's folder. Anything
there may be swapped for a link, a FIFO, a device or a huge sparse file at any moment. So:

- no link is followed at any component: a path is walked from `/` with openat and O_NOFOLLOW
  (`open_nofollow`), and every later step works on the descriptor it returned;
- only a regular file is read, opened non-blocking (a FIFO never hangs the lab), and only up to
  a bound (`read_regular`);
- a file is written through its descriptor: a fresh temp file beside the target (mkstemp), filled,
  fchmod'ed and renamed over the name (`replace_with`); never chmodded or reopened by path, so a
  link planted at either name is replaced, not followed, and a reader never sees half a file.

`tests/test_file_paths.py` fails when code outside this module opens a path it has not been
told is the lab's own.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from lab.errors import LabError

READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(LabError):
    """A path that leads through a link, or to something that is not a regular file or folder."""


def open_nofollow(path: str | os.PathLike, flags: int = READ, mode: int = 0o644) -> int:
    """A descriptor on path, reached without following a link at any component (walked from /
    with openat); ".." is resolved lexically first. UnsafePath names the component at fault."""
    parts = Path(os.path.abspath(path)).parts
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, name in enumerate(parts[1:], start=1):
            last = i == len(parts) - 1
            step = flags | os.O_NOFOLLOW if last else FOLDER
            fd = _descend(fd, name, step, mode, Path(*parts[: i + 1]))
        return fd
    except BaseException:
        os.close(fd)
        raise


def _descend(fd: int, name: str, flags: int, mode: int, where: Path) -> int:
    """name in the folder fd, opened without following a link; fd is closed once it is (left
    open for the caller to close when it is not). where: the path, for UnsafePath's words."""
    try:
        inner = os.open(name, flags, mode, dir_fd=fd)
    except OSError as e:
        raise _unsafe(where, e) from None
    os.close(fd)
    return inner


def _unsafe(where: Path, e: OSError) -> Exception:
    if e.errno in (errno.ELOOP, errno.ENOTDIR):  # a link met with O_NOFOLLOW; a link or a file met as a folder
        kind = "a link" if os.path.islink(where) else "not a folder"
        return UnsafePath(f"{where}: {kind}, never followed")
    return e


def read_regular(
    path: str | os.PathLike, limit: int | None = None, *, tail: bool = False, owner: int | None = None
) -> bytes | None:
    """A plain file's bytes, never read through a link at any component. None when it is missing,
    reached through a link, not a regular file (of uid `owner`, when given), or larger than
    `limit`; with tail, its last `limit` bytes instead."""
    opened = _regular(path, owner)
    if opened is None:
        return None
    f, info = opened
    with f:
        if limit is not None and info.st_size > limit:
            if not tail:
                return None
            f.seek(info.st_size - limit)
        return f.read(limit) if limit is not None else f.read()


def read_from(path: str | os.PathLike, offset: int, limit: int) -> tuple[bytes, int] | None:
    """At most `limit` bytes of a regular file from `offset`, and the file's size now (a log that
    grows): None when it is missing or no regular file. No link is followed."""
    opened = _regular(path)
    if opened is None:
        return None
    f, info = opened
    with f:
        f.seek(offset)
        return f.read(limit), info.st_size


def _regular(path: str | os.PathLike, owner: int | None = None) -> tuple[IO[bytes], os.stat_result] | None:
    """An open regular file (of uid `owner`, when given) and its stat, reached through no link."""
    try:
        f = os.fdopen(open_nofollow(path), "rb")
    except (OSError, UnsafePath):
        return None
    info = os.fstat(f.fileno())
    if not stat.S_ISREG(info.st_mode) or (owner is not None and info.st_uid != owner):
        f.close()
        return None
    return f, info


def read_head(path: str | os.PathLike, count: int) -> bytes | None:
    """A regular file's first `count` bytes (what kind of file it is), reached through no link."""
    opened = _regular(path)
    if opened is None:
        return None
    f, _ = opened
    with f:
        return f.read(count)


def read_text(path: str | os.PathLike, limit: int, *, tail: bool = False) -> str | None:
    """read_regular, decoded (bad bytes replaced): for logs and events a job writes."""
    raw = read_regular(path, limit, tail=tail)
    return None if raw is None else raw.decode(errors="replace")


def regular_files(directory: str | os.PathLike) -> Iterator[tuple[os.stat_result, Path]]:
    """(lstat, path relative to directory) of each regular file below it; no link is followed,
    neither on the way to directory nor inside it (fwalk on the descriptor it was opened by)."""
    try:
        top = open_nofollow(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, UnsafePath):
        return
    try:
        for root, _dirs, names, dir_fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            for name in names:
                try:
                    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue  # gone since listed
                if stat.S_ISREG(info.st_mode):
                    yield info, Path(root, name)
    finally:
        os.close(top)


def replace_with(path: Path, write: Callable[[IO[bytes]], object], mode: int = 0o644) -> None:
    """write(f) fills a fresh file (a binary file object) beside path; then it takes path's place.
    The temp file is never touched by name but to rename it: a link swapped in for it mid-write
    is renamed over path (refused by check_output_path beforehand where others could do that),
    never written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    replace_with(path, lambda f: f.write(text.encode()))


def write_beneath(root: Path, relative: str, text: str) -> Path:
    """Write root/relative (made atomically, mode 0644) without following a link anywhere: for the
    folders a container or a node can write into (a node's dir, the events), where a planted link
    would otherwise make the lab, as root, create or overwrite a file elsewhere."""
    *folders, name = Path(relative).parts
    fd = _folder_beneath(root, folders)
    try:
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


def put_beneath(root: Path, relative: str, data: bytes, offset: int) -> None:
    """data into root/relative at offset, as a copy of another machine's file grows (offset 0: the
    file afresh), no link followed anywhere and nothing outside root reached: relative is another
    machine's word (lab.runtimes.ray_mirror), so ".." or a path from / is refused."""
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or any(p in ("..", ".") for p in parts):
        raise UnsafePath(f"{relative!r}: not a path beneath {root}")
    fd = _folder_beneath(root, parts[:-1])
    try:
        out = os.open(
            parts[-1], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=fd
        )
    except OSError as e:
        raise _unsafe(root / relative, e) from None
    finally:
        os.close(fd)
    try:
        if not stat.S_ISREG(os.fstat(out).st_mode):
            raise UnsafePath(f"{root / relative}: not a regular file")
        if offset == 0:
            os.ftruncate(out, 0)
        os.pwrite(out, data, offset)
    finally:
        os.close(out)


def _folder_beneath(root: Path, folders: Sequence[str]) -> int:
    """A descriptor on root/folders..., each made if missing (as mkdir(1) would: the umask
    decides), none reached through a link."""
    fd = open_nofollow(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for folder in folders:
            try:
                os.mkdir(folder, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            fd = _descend(fd, folder, FOLDER, 0o777, root / folder)
        return fd
    except BaseException:
        os.close(fd)
        raise
