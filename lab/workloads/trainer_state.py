"""The trainer's state on disk: what a checkpoint holds, and how a run resumes from one."""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from lab.health import injected_error as injected
from lab.health.events import Event, EventLog
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


def all_rng(ctx: Ctx) -> list[dict]:
    """Every rank's RNG state, on every rank (any node may be the one that writes)."""
    if not ctx.distributed:
        return [rng_state()]
    states: list[dict] = [{} for _ in range(ctx.world_size)]
    dist.all_gather_object(states, rng_state())
    return states


def keeps_checkpoints(args, ctx: Ctx) -> bool:
    """The rank that writes and reads its node's checkpoints: each node's local rank 0, or
    rank 0 alone when every node sees the same directory (--ckpt-shared)."""
    return ctx.rank == 0 if args.ckpt_shared else ctx.local_rank == 0


def reporter(events: EventLog, rank: int):
    """What a loader calls on each damaged checkpoint it sets aside: an event and one line."""

    def invalid(path: Path, why: str) -> None:
        events.write(Event.CHECKPOINT_INVALID, path=str(path), reason=why)
        say(f"rank {rank}: skipping checkpoint {path.name}: {why}; set aside as {path.name}.bad")

    return invalid


def resume(args, ctx: Ctx, events: EventLog) -> dict | None:
    """The newest checkpoint any node can load, on every rank (peer recovery).

    Each node's keeper loads the newest valid checkpoint in its own directory (setting
    bad ones aside); the ranks agree on the newest step found anywhere; the lowest rank
    that has it sends it to all over the process group, and a keeper whose node lacked
    it (a replaced pod, an emptied disk) writes it down, so its node has its copy again.
    """
    if not args.ckpt_dir:
        return None
    directory = Path(args.ckpt_dir)
    found = None
    if keeps_checkpoints(args, ctx):
        found = checkpoint.load_newest_valid(directory, reporter(events, ctx.rank))
    mine = found[1]["step"] if found else -1
    steps = [mine]
    if ctx.distributed:
        steps = [-1] * ctx.world_size
        dist.all_gather_object(steps, mine)
    newest = max(steps)
    if newest < 0:
        events.write(Event.NO_CHECKPOINT, directory=str(directory))
        return None
    source = steps.index(newest)
    state = found[1] if found and mine == newest else None
    if ctx.distributed:
        box = [state if ctx.rank == source else None]
        dist.broadcast_object_list(box, src=source)
        state = box[0]
    assert state is not None
    path = checkpoint.path_for(directory, newest)
    if keeps_checkpoints(args, ctx) and mine != newest:
        path = checkpoint.save(directory, newest, state)
        events.write(Event.CHECKPOINT_RECEIVED, step=newest, source_rank=source, path=str(path))
        say(f"rank {ctx.rank}: received checkpoint step {newest} from rank {source}; kept as {path}")
    return {**state, "path": str(path)}


def save_checkpoint(args, ctx, model, optimizer, step, position, events, metrics) -> None:
    """Every rank takes part (the RNG states are gathered); the keeper of checkpoints writes the
    model, the optimizer, the step and the data's position (lab.workloads.data_position)."""
    rngs = all_rng(ctx)  # a collective: every rank takes part
    if not keeps_checkpoints(args, ctx):
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
                "sampler": {**position.to_json(), "seed": args.seed},
                "world_size": ctx.world_size,
                "rng": rngs,
            },
            midway=lambda tmp: pause_point(events)(step, tmp),
        )
    except OSError as e:
        events.write(Event.CHECKPOINT_FAILED, step=step, reason=str(e))
        if metrics:
            metrics.checkpoint_failures.inc()
        return
    seconds = time.perf_counter() - started
    events.write(Event.CHECKPOINT_SAVED, step=step, path=str(path), seconds=seconds)
    if metrics:
        metrics.checkpoint_save.observe(seconds)
        metrics.last_checkpoint_time.set(time.time())


def pause_point(events: EventLog):
    """pause(step, where): where a save in hand stops for a while when the kill-in-save drill asks
    (lab.health.injected_error's SIGRTMIN+8), said first in a `save_paused` event, so that the
    drill's kill lands inside it."""
    return lambda step, where: injected.midway(lambda: events.write(Event.SAVE_PAUSED, step=step, path=str(where)))
