"""Checkpoint files by name and by age, and the corrupt-checkpoint drill's damage to them: no torch.

A drill damages a checkpoint while it holds a worker stopped (SIGSTOP), and the worker's peers
wait in a collective meanwhile, only as long as the job's process-group timeout (a user's
script may set 10 s). Importing torch there took 12.5 s on a loaded CI machine: the peers timed
out before the kill. So what runs in that window (a node agent's call, a `python -c` in a pod)
imports this module, which needs nothing but the standard library.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

NAME = re.compile(r"^step_(\d{8})\.ckpt$")  # the lab trainer's checkpoints (lab.workloads.checkpoint)


class CheckpointError(Exception):
    """The file is not a whole, valid checkpoint."""


def path_for(directory: Path, step: int) -> Path:
    return directory / f"step_{step:08d}.ckpt"


def checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in the directory, newest step first."""
    if not directory.is_dir():
        return []
    steps = {p: int(m[1]) for p in directory.iterdir() if (m := NAME.match(p.name))}
    return sorted(steps, key=steps.__getitem__, reverse=True)


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
