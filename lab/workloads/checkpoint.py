"""Checkpoints that are written atomically, verified on load, and never silently wrong.

A checkpoint is one file, `step_00000020.ckpt`:

    MAGIC (8 bytes) | sha256 of the payload (32 bytes) | payload (torch.save bytes)

It is written to a temporary file in the same directory, fsynced, then renamed over
its final name, and the directory is fsynced: a crash leaves either the old set of
checkpoints or the new one, never half a file under a checkpoint's name. Loading
checks the digest, so a truncated or corrupted file is detected, not unpickled. The
newest `KEEP` checkpoints are kept; a bad one is set aside as `*.bad`.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
import stat
from collections.abc import Callable
from pathlib import Path

import torch

from lab.health import injected_error as injected

MAGIC = b"LABCKPT1"
KEEP = 2
NAME = re.compile(r"^step_(\d{8})\.ckpt$")


class CheckpointError(Exception):
    """The file is not a whole, valid checkpoint."""


def path_for(directory: Path, step: int) -> Path:
    return directory / f"step_{step:08d}.ckpt"


def save(directory: Path, step: int, state: dict) -> Path:
    """Write state as the checkpoint of `step`, atomically; drop all but the newest KEEP."""
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    final = path_for(directory, step)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    with open(injected.written_to(tmp), "wb") as f:  # a full disk, on request (lab.health.injected_error)
        f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    _fsync_dir(directory)
    for old in checkpoints(directory)[KEEP:]:
        old.unlink(missing_ok=True)
    return final


def read(path: Path) -> dict:
    """Load and verify one checkpoint; CheckpointError says what is wrong with it."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"unreadable: {e.strerror}") from None
    header = len(MAGIC) + 32
    if len(data) < header or not data.startswith(MAGIC):
        raise CheckpointError(f"not a lab checkpoint or truncated ({len(data)} bytes)")
    digest, payload = data[len(MAGIC) : header], data[header:]
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointError(f"checksum mismatch: truncated or corrupted ({len(data)} bytes)")
    # weights_only: tensors, containers and plain values only. A file with a valid checksum
    # can still come from someone else; unpickling it must never run their code.
    try:
        return torch.load(io.BytesIO(payload), weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "unsupported type"
        raise CheckpointError(f"not a plain checkpoint (weights_only refused it: {first[:160]})") from None


def checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in the directory, newest step first."""
    if not directory.is_dir():
        return []
    steps = {p: int(m[1]) for p in directory.iterdir() if (m := NAME.match(p.name))}
    return sorted(steps, key=steps.__getitem__, reverse=True)


def load_newest_valid(
    directory: Path,
    on_invalid: Callable[[Path, str], None],
    set_aside: bool = True,
) -> tuple[Path, dict] | None:
    """The newest checkpoint that verifies, or None. Each bad one is reported, and set aside
    (renamed *.bad) when set_aside is true -- only one process should do that."""
    for path in checkpoints(directory):
        try:
            return path, read(path)
        except CheckpointError as e:
            on_invalid(path, str(e))
            if set_aside:
                try:
                    os.replace(path, path.with_name(path.name + ".bad"))
                except FileNotFoundError:
                    pass
    return None


def newest_file(directory: Path) -> Path | None:
    """The most recently written regular file anywhere below directory (a script's own
    checkpoints: one file, or a torch.distributed.checkpoint folder). Links are not followed."""
    found: list[tuple[float, str]] = []
    for root, _dirs, names in os.walk(directory):  # os.walk does not descend into linked dirs
        for name in names:
            info = os.lstat(os.path.join(root, name))
            if stat.S_ISREG(info.st_mode):
                found.append((info.st_mtime, os.path.join(root, name)))
    return Path(max(found)[1]) if found else None


def corrupt_newest(directory: Path, mode: str = "truncate") -> Path:
    """Damage the newest checkpoint in directory, for the corrupt-checkpoint drill: cut it in
    half (truncate), or flip bytes in its second half (flip). The trainer's newest step file,
    else the newest file of any name (a user's script). Returns its path."""
    found = checkpoints(directory)
    newest = found[0] if found else newest_file(directory) if directory.is_dir() else None
    if newest is None:
        raise CheckpointError(f"no checkpoint in {directory} to corrupt")
    data = bytearray(newest.read_bytes())
    if mode == "truncate":
        data = data[: len(data) // 2]
    elif mode == "flip":
        for i in range(len(data) // 2, len(data), 97):
            data[i] ^= 0xFF
    else:
        raise ValueError(f"unknown corruption mode {mode!r} (truncate or flip)")
    # In place, never through a link planted since it was found.
    fd = os.open(newest, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
    with os.fdopen(fd, "wb") as f:
        f.write(bytes(data))
    return newest


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
