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
from collections.abc import Callable
from pathlib import Path

import torch

from lab.health import injected_error as injected
from lab.workloads.checkpoint_files import CheckpointError, checkpoints, path_for

MAGIC = b"LABCKPT1"
KEEP = 2


def save(directory: Path, step: int, state: dict, midway: Callable[[Path], None] = lambda tmp: None) -> Path:
    """Write state as the checkpoint of `step`, atomically; drop all but the newest KEEP.
    midway(tmp) is called with half the file written (where storage that stalls keeps it:
    lab.health.injected_error's pause)."""
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    final = path_for(directory, step)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    data = MAGIC + hashlib.sha256(payload).digest() + payload
    with open(injected.written_to(tmp), "wb") as f:  # a full disk, on request (lab.health.injected_error)
        f.write(data[: len(data) // 2])
        f.flush()
        midway(tmp)
        f.write(data[len(data) // 2 :])
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


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
