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

from lab import files

NAME = re.compile(r"^step_(\d{8})\.ckpt$")  # the lab trainer's checkpoints (lab.workloads.checkpoint)
DCP_NAME = re.compile(
    r"dcp_(\d{8})"
)  # its committed DCP steps, folders (--parallel fsdp2, lab.workloads.checkpoint_dcp)


class CheckpointError(Exception):
    """The file is not a whole, valid checkpoint."""


def path_for(directory: Path, step: int) -> Path:
    return directory / f"step_{step:08d}.ckpt"


def checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in the directory, newest step first."""
    steps = {directory / rel: int(m[1]) for _, rel in files.regular_files(directory) if (m := NAME.fullmatch(str(rel)))}
    return sorted(steps, key=steps.__getitem__, reverse=True)


# What a checkpoint looks like, when its name is not the trainer's: torch.save's zip or pickle,
# safetensors, a torch.distributed.checkpoint folder's shards and metadata. A log or a CSV that
# shares the folder is never the drill's to damage.
SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".distcp", ".metadata", ".tar")
MAGIC = (b"PK\x03\x04", b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


def newest_file(directory: Path) -> Path | None:
    """The most recently written checkpoint anywhere below directory (a script's own checkpoints:
    one file, or a torch.distributed.checkpoint folder). No link is followed, at any component."""
    found = [(info.st_mtime, str(rel)) for info, rel in files.regular_files(directory) if _looks_saved(directory, rel)]
    return directory / max(found)[1] if found else None


def newest_dcp_shard(directory: Path) -> Path | None:
    """A shard of the trainer's newest committed DCP step (an uncommitted .tmp folder is never read)."""
    shards = [rel for _, rel in files.regular_files(directory) if rel.suffix == ".distcp"]
    committed = [rel for rel in shards if len(rel.parts) == 2 and DCP_NAME.fullmatch(rel.parts[0])]
    return directory / max(committed, key=lambda rel: (rel.parts[0], rel.name)) if committed else None


def _looks_saved(directory: Path, relative: Path) -> bool:
    if relative.suffix in SUFFIXES:
        return True
    head = files.read_head(directory / relative, 8)
    return head is not None and (head.startswith(MAGIC) or _safetensors(head))


def _safetensors(head: bytes) -> bool:
    return len(head) == 8 and 0 < int.from_bytes(head, "little") < 100 * 2**20


def corrupt_newest(directory: Path, mode: str = "truncate") -> Path:
    """Damage the newest checkpoint in directory, for the corrupt-checkpoint drill: cut it in
    half (truncate), or flip bytes in its second half (flip). The trainer's newest step file,
    else the newest checkpoint of any name (a user's script). Returns its path.

    The folder is the job's: a container or script may swap a folder on the way for a link, or
    plant a FIFO. The file is reached without following a link at any component and damaged
    through that one descriptor, only if it is a regular file."""
    if mode not in ("truncate", "flip"):
        raise ValueError(f"unknown corruption mode {mode!r} (truncate or flip)")
    try:
        os.close(files.open_nofollow(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    except (OSError, files.UnsafePath) as e:
        raise CheckpointError(f"cannot reach the checkpoints: {e}") from None
    found = checkpoints(directory)
    newest = found[0] if found else newest_dcp_shard(directory) or newest_file(directory)
    if newest is None:
        raise CheckpointError(f"no checkpoint in {directory} to corrupt")
    try:
        fd = files.open_nofollow(newest, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except (OSError, files.UnsafePath) as e:
        raise CheckpointError(f"cannot damage {newest}: {e}") from None
    with os.fdopen(fd, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise CheckpointError(f"{newest} is not a regular file: nothing damaged")
        if mode == "truncate":
            f.truncate(size // 2)
        else:
            _flip_second_half(f, size)
    return newest


def _flip_second_half(f, size: int, chunk: int = 2**20) -> None:
    """Every 97th byte of the second half, inverted, a chunk at a time (a checkpoint may be GBs)."""
    start = size // 2
    for offset in range(start, size, chunk):
        f.seek(offset)
        data = bytearray(f.read(chunk))
        for i in range((start - offset) % 97, len(data), 97):
            data[i] ^= 0xFF
        f.seek(offset)
        f.write(data)
