"""The trainer's state on disk: what a checkpoint holds, and how a run resumes from one."""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from lab.health.events import EventLog
from lab.workloads import checkpoint
from lab.workloads.distributed import Ctx, say


def rng_state() -> dict:
    """Every RNG's state in types torch.load(weights_only=True) accepts (NumPy's keys as a tensor)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss), float(cached)],
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(tuple(state["python"]) if not isinstance(state["python"], tuple) else state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))


def gather_rng(ctx: Ctx) -> list[dict] | None:
    """Every rank's RNG state, on rank 0 (None on the others)."""
    if not ctx.distributed:
        return [rng_state()]
    states: list[dict] | None = [{} for _ in range(ctx.world_size)] if ctx.rank == 0 else None
    dist.gather_object(rng_state(), states, dst=0)
    return states


def resume(args, ctx: Ctx, events: EventLog) -> dict | None:
    """Rank 0 picks the newest valid checkpoint and tells the others which one it is."""
    if not args.ckpt_dir:
        return None
    directory = Path(args.ckpt_dir)
    chosen = None
    if ctx.rank == 0:

        def invalid(path, why):
            events.write("checkpoint_invalid", path=str(path), reason=why)
            say(f"rank 0: skipping checkpoint {path.name}: {why}; set aside as {path.name}.bad")

        found = checkpoint.load_newest_valid(directory, invalid)
        chosen = str(found[0]) if found else None
    if ctx.distributed:
        box = [chosen]
        dist.broadcast_object_list(box, src=0)
        chosen = box[0]
    if chosen is None:
        events.write("no_checkpoint", directory=str(directory))
        return None
    state = found[1] if found is not None else checkpoint.read(Path(chosen))  # rank 0 found it
    return {**state, "path": chosen}


def save_checkpoint(args, ctx, model, optimizer, step, epoch, batch, events, metrics) -> None:
    rngs = gather_rng(ctx)  # a collective: every rank takes part
    if ctx.rank != 0:
        return
    started = time.perf_counter()
    try:
        path = checkpoint.save(
            Path(args.ckpt_dir),
            step,
            {
                "step": step,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "sampler": {"epoch": epoch, "batch": batch, "seed": args.seed},
                "world_size": ctx.world_size,
                "rng": rngs,
            },
        )
    except OSError as e:
        events.write("checkpoint_failed", step=step, reason=str(e))
        if metrics:
            metrics.checkpoint_failures.inc()
        return
    seconds = time.perf_counter() - started
    events.write("checkpoint_saved", step=step, path=str(path), seconds=seconds)
    if metrics:
        metrics.checkpoint_save.observe(seconds)
        metrics.last_checkpoint_time.set(time.time())
