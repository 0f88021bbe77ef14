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
from collections.abc import Iterable
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


def newest_saved(directory: Path, saved: set[tuple[int, int]]) -> Path | None:
    """The most recently written file below directory that a script saved itself: its (device,
    inode) is one its torch.save recorded (a rename keeps it; a copy, a log, a file of another
    program's has another), or it lies in a folder its dcp.save recorded. No link is followed."""
    found: list[tuple[float, str]] = []
    try:
        top = files.open_nofollow(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, files.UnsafePath):
        return None
    try:
        for root, _dirs, names, dir_fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            here = os.fstat(dir_fd)
            in_saved_folder = (here.st_dev, here.st_ino) in saved
            for name in names:
                try:
                    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue  # gone since listed
                if stat.S_ISREG(info.st_mode) and (in_saved_folder or (info.st_dev, info.st_ino) in saved):
                    found.append((info.st_mtime, os.path.normpath(os.path.join(root, name))))
    finally:
        os.close(top)
    return directory / max(found)[1] if found else None


def _looks_saved(directory: Path, relative: Path) -> bool:
    if relative.suffix in SUFFIXES:
        return True
    head = files.read_head(directory / relative, 8)
    return head is not None and (head.startswith(MAGIC) or _safetensors(head))


def _safetensors(head: bytes) -> bool:
    return len(head) == 8 and 0 < int.from_bytes(head, "little") < 100 * 2**20


BEFORE_THE_FIRST_SAVE = (
    "nothing saved there to corrupt (did the fault come before the first save? fire it later: --at-step, --at-time)"
)


def corrupt_newest(directory: Path, mode: str = "truncate", saved: Iterable[Iterable[int]] = ()) -> Path:
    """Damage the newest checkpoint in directory, for the corrupt-checkpoint drill: cut it in
    half (truncate), or flip bytes in its second half (flip). The trainer's newest step file;
    else, where a user's script recorded its saves (`saved`: the (device, inode) of each file or
    DCP folder its torch.save or dcp.save wrote), the newest of those (newest_saved); else the
    newest checkpoint of any name. Returns its path. Or a DCP step's own damage (no-metadata,
    mixed-steps: damage_dcp).

    The folder is the job's: a container or script may swap a folder on the way for a link, or
    plant a FIFO. The file is reached without following a link at any component and damaged
    through that one descriptor, only if it is a regular file."""
    if mode not in ("truncate", "flip", *DCP_DAMAGES):
        raise ValueError(f"unknown corruption mode {mode!r} (truncate, flip, {', '.join(DCP_DAMAGES)})")
    try:
        os.close(files.open_nofollow(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    except FileNotFoundError:
        raise CheckpointError(f"{directory} does not exist yet: {BEFORE_THE_FIRST_SAVE}") from None
    except (OSError, files.UnsafePath) as e:
        raise CheckpointError(f"cannot reach the checkpoints: {e}") from None
    if mode in DCP_DAMAGES:  # a DCP step's own damage: its .metadata, or shards of two steps
        return damage_dcp(directory, mode)
    found = checkpoints(directory)
    identities = {(int(dev), int(ino)) for dev, ino in saved}
    if found:
        newest: Path | None = found[0]
    elif identities:
        newest = newest_saved(directory, identities)
    else:
        newest = newest_dcp_shard(directory) or newest_file(directory)
    if newest is None:
        if identities:
            raise CheckpointError(f"no file your script saved in {directory} to corrupt")
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


# A DCP step is a folder: a `.distcp` file per rank and the `.metadata` the coordinator writes
# last. A save killed before its end leaves the shards and no `.metadata`; a script that saves
# every step into one folder, or moves a `latest` pointer before its save is whole, leaves
# shards of two steps side by side, each file whole, the step not. The steps are the trainer's
# committed `dcp_NNNNNNNN/` folders, else (a user's script) the folders holding a `.metadata`.
DCP_DAMAGES = ("no-metadata", "mixed-steps")
METADATA = ".metadata"
CHUNK = 1 << 20


def dcp_steps(directory: Path) -> list[Path]:
    """The DCP steps below directory, newest first: the trainer's committed folders by step, else
    every folder holding a `.metadata`, by when that was written."""
    found = {(directory / rel).parent: info.st_mtime for info, rel in files.regular_files(directory)
             if rel.name == METADATA}  # fmt: skip
    trainers = sorted((p for p in found if len(p.relative_to(directory).parts) == 1 and DCP_NAME.fullmatch(p.name)),
                      reverse=True)  # fmt: skip
    return trainers or sorted(found, key=found.__getitem__, reverse=True)


def damage_dcp(directory: Path, how: str) -> Path:
    """Damage the newest DCP step below directory as `how` says; returns the file removed or changed."""
    found = dcp_steps(directory)
    if not found:
        raise CheckpointError(f"no DCP step (a folder with {METADATA}) in {directory} to damage")
    if how == "no-metadata":
        return _remove(found[0] / METADATA)
    if how == "mixed-steps":
        if len(found) < 2:
            raise CheckpointError(f"mixed-steps needs two DCP steps in {directory}; found only {found[0].name}")
        return _mix(newest=found[0], older=found[1])
    raise ValueError(f"unknown DCP damage {how!r} ({' or '.join(DCP_DAMAGES)})")


def _remove(path: Path) -> Path:
    """Unlink path through a descriptor on its folder (a link in its place is unlinked, not followed)."""
    try:
        folder = files.open_nofollow(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, files.UnsafePath) as e:
        raise CheckpointError(f"cannot reach {path.parent}: {e}") from None
    try:
        os.unlink(path.name, dir_fd=folder)
    except OSError as e:
        raise CheckpointError(f"cannot remove {path}: {e.strerror}") from None
    finally:
        os.close(folder)
    return path


def _mix(newest: Path, older: Path) -> Path:
    """Overwrite the newest step's largest shard with the same rank's shard of the step before:
    each file whole, the folder two steps. The largest: a tensor every rank holds alike is
    written once, by one rank, and the others' files may hold next to nothing."""
    sizes = {rel.name: info.st_size for info, rel in files.regular_files(newest) if rel.suffix == ".distcp"}
    before = {rel.name for _, rel in files.regular_files(older) if rel.suffix == ".distcp"}
    shared = sorted((size, name) for name, size in sizes.items() if name in before)
    if not shared:
        raise CheckpointError(f"{newest.name} and {older.name} share no shard file to mix")
    name = shared[-1][1]
    target = newest / name
    try:
        src = os.fdopen(files.open_nofollow(older / name), "rb")
    except (OSError, files.UnsafePath) as e:
        raise CheckpointError(f"cannot read {older.name}'s {name}: {e}") from None
    try:
        dst = os.fdopen(files.open_nofollow(target, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), "wb")
    except (OSError, files.UnsafePath) as e:
        src.close()
        raise CheckpointError(f"cannot write {target}: {e}") from None
    with src, dst:
        if not (stat.S_ISREG(os.fstat(src.fileno()).st_mode) and stat.S_ISREG(os.fstat(dst.fileno()).st_mode)):
            raise CheckpointError(f"{target} or {older.name}'s shard is not a regular file: nothing damaged")
        dst.truncate(0)
        while chunk := src.read(CHUNK):
            dst.write(chunk)
    return target
