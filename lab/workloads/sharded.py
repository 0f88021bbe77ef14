"""The trainer's FSDP2 mode (`--parallel fsdp2`): each layer's parameters sharded across the
ranks with `fully_shard`, saved and resumed through DCP (lab.workloads.checkpoint_dcp).

DDP keeps the whole model on every rank and all-reduces gradients; FSDP2 keeps 1/world of each
parameter per rank, all-gathers a layer's parameters for its forward and backward, and
reduce-scatters its gradients. A rank's optimizer therefore sees only its shard, and a
checkpoint is every rank's shards together: DCP's folder, not one file.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from lab.health.events import Event, EventLog
from lab.topology import PARALLEL
from lab.workloads import checkpoint_dcp
from lab.workloads.checkpoint_dcp import ShardedCheckpoints
from lab.workloads.distributed import Ctx
from lab.workloads.trainer_state import reporter


def shard(model: nn.Module, ctx: Ctx) -> nn.Module:
    """Each layer that holds parameters, then the whole, sharded over every rank (one process:
    the model as it is, nothing to shard over)."""
    if not ctx.distributed:
        return model
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    for layer in model.children():
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def checksum(model: nn.Module) -> float:
    """The sum of every weight, whole (a shard gathered first: the same on every rank)."""
    total = 0.0
    for p in model.parameters():
        whole = p.full_tensor() if isinstance(p, DTensor) else p
        total += float(whole.detach().double().sum().item())
    return total


def restore(args, ctx: Ctx, store: ShardedCheckpoints, events: EventLog, model, optimizer) -> dict | None:
    """The newest whole step in --ckpt-dir, as rank 0 verified it, loaded on every rank; its meta
    (step, sampler, world_size), or None: no checkpoint, a fresh start."""
    chosen: list[str | None] = [None]
    if ctx.rank == 0:
        found = checkpoint_dcp.newest_valid(Path(args.ckpt_dir), reporter(events, 0))
        chosen = [str(found) if found else None]
    if ctx.distributed:
        dist.broadcast_object_list(chosen, src=0)
    if chosen[0] is None:
        events.write(Event.NO_CHECKPOINT, directory=str(args.ckpt_dir))
        return None
    meta = store.load(model, optimizer, Path(chosen[0]))
    events.write(Event.CHECKPOINT_LOADED, step=meta["step"], path=chosen[0])
    return meta


def save(store: ShardedCheckpoints, model, optimizer, step: int, meta: dict, events: EventLog) -> None:
    """A DCP save of the step (async: committed later, by the next save or at the end)."""
    started = time.perf_counter()
    _record(store, store.save(model, optimizer, step, meta), started, events)


def flush(store: ShardedCheckpoints | None, events: EventLog) -> None:
    """An async save still in flight, committed (at a preemption or the end)."""
    if store is not None:
        started = time.perf_counter()
        _record(store, store.flush(), started, events)


def _record(store: ShardedCheckpoints, committed: Path | None, started: float, events: EventLog) -> None:
    """The event of a step committed, with rank 0's measure of the time the call took."""
    if committed is not None and store.rank == 0:
        step = int(committed.name.split("_")[1])
        events.write(Event.CHECKPOINT_SAVED, step=step, path=str(committed), seconds=time.perf_counter() - started)


def refused(args, in_process: bool) -> str:
    """Why the trainer refuses this combination, in one line ("" when it runs)."""
    if args.parallel not in PARALLEL:  # argparse leaves a default (LAB_PARALLEL's) unchecked
        return f"--parallel {args.parallel!r} (from LAB_PARALLEL): choose {' or '.join(PARALLEL)}"
    if args.parallel == "ddp" and args.save != "sync":
        return "--save async is DCP's and needs --parallel fsdp2 (DDP's checkpoint is one file, saved in the step)"
    if args.parallel == "fsdp2" and in_process:
        return (
            "--parallel fsdp2 cannot recover in-process: a rank holds only its shard, so no peer can hand "
            "a replacement the whole model; use --recovery restart"
        )
    if args.parallel == "fsdp2" and args.ckpt_dir and not args.ckpt_shared:
        return "--parallel fsdp2 saves through DCP into one folder every rank sees: add --ckpt-shared"
    return ""
