"""Checkpoints of a sharded model through torch.distributed.checkpoint (DCP), made atomic and
verified as the one-file checkpoints are (lab.workloads.checkpoint).

DCP writes one file per rank and a `.metadata` the coordinator writes last, into a folder.
Nothing in DCP says a folder is complete, or that its files are the ones it wrote. So every
rank writes into `.dcp_00000020.tmp/`; once every rank's writes are done (each waited for its
own, then a barrier), rank 0 adds `meta.json` (the step, the sampler's place, the world size)
and `manifest.json` (every file's size and sha256), fsyncs them and renames the folder to
`dcp_00000020/`. A name without the dot is therefore a whole step: a crash mid-save (sync or
async) leaves a `.tmp` folder no load ever reads, and a missing `.metadata`, a truncated shard
or a file of another step fails the manifest and is set aside as `*.bad`, the step before used.

Async saves (`--save async`) stage the state and write it from a thread; the step is committed
at the next save, at a preemption or at the end, when every rank has waited for its own. DCP's
background writes use collectives, so they run on a process group of their own, apart from the
training's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from lab.workloads.checkpoint import KEEP, _fsync_dir
from lab.workloads.checkpoint_files import DCP_NAME as NAME
from lab.workloads.checkpoint_files import CheckpointError

MANIFEST, META = "manifest.json", "meta.json"


def path_for(directory: Path, step: int) -> Path:
    return directory / f"dcp_{step:08d}"


def steps(directory: Path) -> list[Path]:
    """The committed steps in `directory`, newest first."""
    found = [p for p in directory.iterdir() if NAME.fullmatch(p.name) and p.is_dir()] if directory.is_dir() else []
    return sorted(found, key=lambda p: p.name, reverse=True)


class ShardedCheckpoints:
    """One job's DCP checkpoints in one folder every rank sees (rank 0 commits)."""

    def __init__(
        self,
        directory: Path,
        rank: int,
        distributed: bool,
        asynchronous: bool = False,
        midway: Callable[[int, Path], None] = lambda step, tmp: None,
    ):
        self.directory, self.rank, self.asynchronous = directory, rank, asynchronous
        self.midway = midway  # midway(step, tmp): this rank's files written, the step not committed
        self.group = dist.new_group(backend="gloo") if distributed else None
        self.pending: tuple[int, dict, object | None] | None = None  # (step, meta, the async write's future)

    def save(self, model, optimizer, step: int, meta: dict) -> Path | None:
        """Write the step (sync: committed before it returns; async: staged, written in the
        background, committed by the next save or flush). Returns the committed folder, if any."""
        committed = self.flush()
        tmp = self.directory / f".dcp_{step:08d}.tmp"
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # a crashed save of the same step, never committed
            tmp.mkdir(parents=True)
        self._barrier()
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
        if self.asynchronous:
            self.pending = (step, meta, dcp.async_save(state, checkpoint_id=str(tmp), process_group=self.group))
            return committed
        dcp.save(state, checkpoint_id=str(tmp), process_group=self.group)
        self.pending = (step, meta, None)
        return self.flush()

    def flush(self) -> Path | None:
        """Commit the save in flight once every rank's files are written; the committed folder."""
        if self.pending is None:
            return None
        step, meta, future = self.pending
        self.pending = None
        if future is not None:
            future.result()  # type: ignore[attr-defined]  # this rank's files are written
        self.midway(step, self.directory / f".dcp_{step:08d}.tmp")
        self._barrier()
        return commit(self.directory, step, meta) if self.rank == 0 else path_for(self.directory, step)

    def load(self, model, optimizer, path: Path) -> dict:
        """Load a committed step (verified by rank 0) into the model and optimizer; its meta."""
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=str(path), process_group=self.group)  # in place, into both
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state)
        return json.loads((path / META).read_text())

    def _barrier(self) -> None:
        if self.group is not None:
            dist.barrier(group=self.group)


def commit(directory: Path, step: int, meta: dict) -> Path:
    """Rank 0: the manifest, then the rename that makes the step a checkpoint; older steps pruned."""
    tmp, final = directory / f".dcp_{step:08d}.tmp", path_for(directory, step)
    (tmp / META).write_text(json.dumps({**meta, "step": step}))
    manifest = {p.name: _digest(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    with open(tmp / MANIFEST, "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    shutil.rmtree(final, ignore_errors=True)  # the same step saved again (a rerun from before it)
    os.replace(tmp, final)
    _fsync_dir(directory)
    for old in steps(directory)[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def verify(path: Path) -> None:
    """CheckpointError unless every file the manifest names is there, whole, and nothing else."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"no readable {MANIFEST}: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(manifest, dict) or ".metadata" not in manifest or META not in manifest:
        raise CheckpointError("the manifest names no .metadata or meta.json: not a whole DCP step")
    present = {p.name for p in path.iterdir() if p.is_file()} - {MANIFEST}
    if missing := sorted(set(manifest) - present):
        raise CheckpointError(f"missing {', '.join(missing)}")
    if extra := sorted(present - set(manifest)):
        raise CheckpointError(f"files it did not write: {', '.join(extra)} (another step's?)")
    for name, recorded in manifest.items():
        if recorded != list(_digest(path / name)):
            raise CheckpointError(f"{name} differs from what was saved: truncated or corrupted")


def newest_valid(directory: Path, on_invalid) -> Path | None:
    """Rank 0: the newest committed step that verifies; each bad one reported and set aside."""
    for path in steps(directory):
        try:
            verify(path)
            return path
        except CheckpointError as e:
            on_invalid(path, str(e))
            bad = path.with_name(path.name + ".bad")
            shutil.rmtree(bad, ignore_errors=True)  # the same step set aside before
            os.replace(path, bad)
    return None


def _digest(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return path.stat().st_size, digest.hexdigest()
