"""The resumable trainer: the workload the lab's exercises break, and watch in Prometheus.

    python lab/workloads/trainer.py --steps 50                        # one process, no DDP
    torchrun --nproc-per-node=2 lab/workloads/trainer.py --steps 200 --ckpt-dir /tmp/ckpt
    lab run --nodes 2 --nproc-per-node 2 lab/workloads/trainer.py --steps 200 --step-time 0.05

A small MLP learns a fixed linear map from deterministic synthetic data. Each rank trains on
its slice of each epoch's shuffled order, as a `DistributedSampler` deals it; where the job is in
that order travels in every checkpoint (lab/workloads/data_position.py), so a resumed run sees
exactly the batches it would have seen, and one resumed on fewer or more ranks goes on from the
next unconsumed sample. Each step's event names its epoch and sample indices: the drills count
what was skipped or repeated (lab.exercises.samples).

Every `--ckpt-every` steps each node's local rank 0 writes a checkpoint into its own
`--ckpt-dir` (atomically, newest two kept; with `--ckpt-shared`, one shared directory,
rank 0 alone) holding the model, the optimizer, the step, the sampler position and
every rank's torch, Python and NumPy RNG states. On start the ranks resume from the
newest checkpoint that verifies on any node, sent over the process group to the nodes
that lack it (lab/workloads/trainer_state.py); a truncated or corrupted one is logged
and set aside.

On SIGTERM the ranks agree to stop at the next step, checkpoint it, and exit 0, so a
preempted job loses no step. With `--events-dir` each rank appends JSON lines (start,
rendezvous_done, checkpoint_*, step, exit) to rankN.jsonl. With a metrics port base (`--metrics-port-base` or
LAB_METRICS_PORT_BASE) each rank serves /metrics on base + rank, and with
`--targets-dir` (or LAB_TARGETS_DIR) registers itself for Prometheus. `--ab-monitoring K`
measures what that monitoring costs (lab/workloads/monitoring_ab.py).
At the end every rank prints `rank R local_rank L host H checksum C (hex) at step S`:
equal hex, equal weights (the sum of all parameters, in float64).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import TensorDataset

from lab.health import injected_error
from lab.health.error_text import error_text
from lab.health.events import Event, EventLog, ExitReason
from lab.health.rank_exporter import ExporterPortError, RankMetrics, register_target
from lab.inprocess.api import attempts
from lab.nodeenv import NodeEnv
from lab.workloads import sharded
from lab.workloads.checkpoint_dcp import ShardedCheckpoints
from lab.workloads.comm_hooks import timed_allreduce_hook
from lab.workloads.data_position import Data, Position
from lab.workloads.distributed import Ctx, Preemption, StepDeadline, ddp, finite, joined, say, settle_buckets, single
from lab.workloads.monitoring_ab import MonitoringAB
from lab.workloads.step_clock import StepClock, record_step
from lab.workloads.trainer_args import parse_args
from lab.workloads.trainer_state import pause_point, resume, save_checkpoint, set_rng_state


def make_dataset(samples: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, 16, generator=g)
    w = torch.randn(16, 1, generator=g)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(samples, 1, generator=g))


def make_model(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 1))


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    events = EventLog(args.events_dir, rank, local_rank)
    world = int(os.environ.get("WORLD_SIZE", 1))
    # What an uninterrupted epoch consumes at this size (DistributedSampler's drop_last, whole batches).
    epoch_samples = args.samples // world // args.batch_size * args.batch_size * world
    events.write(Event.START, world_size=world, steps=args.steps, epoch_samples=epoch_samples)
    metrics = None
    if args.metrics_port_base:
        # Nodes with their own address (pods) all use the same ports: keyed by local rank.
        by_local = NodeEnv.parse().metrics_port_by == "local_rank"
        port = args.metrics_port_base + (local_rank if by_local else rank)
        metrics = RankMetrics(
            rank=rank,
            local_rank=local_rank,
            node=events.common["node"],
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            restart=events.common["restart"],
        )
        try:
            metrics.serve(port)
        except ExporterPortError as e:
            raise SystemExit(f"trainer rank {rank}: error: {e}") from None
        if args.targets_dir:
            register_target(args.targets_dir, f"rank{rank}", port, metrics.where)
    progress = {"step": 0, "preempted": False}
    held = Held()
    injected_error.install()  # the rank-exception drill's fault
    try:
        # One attempt, unless a peer dies under in-process recovery (lab.inprocess): then this
        # rank keeps its model and optimizer (held) and trains on in the group the keepers re-form.
        for attempt in attempts():
            with attempt:
                if attempt.in_process:  # under torchrun, the restart count torchrun gave (TORCHELASTIC_RESTART_COUNT)
                    events.restart(attempt.generation)
                ctx = joined(attempt.join_seconds) if attempt.distributed else single()
                # Everything that holds the process group (the DDP model above all) lives in
                # train()'s frame, so it is freed before the group is destroyed.
                train(args, ctx, attempt, events, metrics, progress, held)
            if attempt.peer_lost:
                events.write(Event.COLLECTIVE_FAILED, step=progress["step"], error=attempt.peer_lost)
    except BaseException as e:
        events.write(Event.EXIT, reason=ExitReason.ERROR, step=progress["step"], error=error_text(e))
        raise
    if progress["preempted"]:
        # A worker torchrun runs as a function (--run-path, the lab's preloaded workers) that
        # returns waits for its agent to collect the return value. An agent shutting down on
        # SIGTERM never does (the worker would sit out the grace period until SIGKILLed): leave
        # on our own after a moment. One that is not (the SIGTERM was this rank's alone) collects
        # it, and the group ends as done; without it, it would wait for the value forever.
        sys.stdout.flush()
        sys.stderr.flush()
        Preemption.leave_if_uncollected()


class Held:
    """What outlives an attempt: the model, its optimizer, and the step they hold (None: nothing
    yet, a replacement rank that takes them from a peer)."""

    model: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    step: int | None = None
    position: Position = Position()  # where in the data the step leaves the job


def train(args, ctx: Ctx, attempt, events: EventLog, metrics: RankMetrics | None, progress: dict, held: Held) -> None:
    events.write(Event.RENDEZVOUS_DONE, seconds=ctx.rendezvous_seconds, world_size=ctx.world_size)
    if metrics:
        metrics.rendezvous.set(ctx.rendezvous_seconds)
    if why := sharded.refused(args, attempt.in_process):
        raise SystemExit(f"trainer rank {ctx.rank}: error: {why}")
    store = (
        ShardedCheckpoints(Path(args.ckpt_dir), ctx.rank, ctx.distributed, args.save == "async", pause_point(events))
        if (args.parallel == "fsdp2" and args.ckpt_dir)
        else None
    )
    model, optimizer, step = held_state(args, ctx, attempt, events, metrics, held, store)
    ab = MonitoringAB(args.ab_monitoring) if args.ab_monitoring else None
    clock = StepClock()
    ddp_model = wrapped(model, ctx, args, metrics, ab, clock) if args.parallel == "ddp" else model
    dataset = make_dataset(args.samples)
    data = Data(args.samples, args.seed, ctx.world_size, ctx.rank, args.batch_size)
    loss_fn = nn.MSELoss()
    if ctx.distributed and args.parallel == "ddp":
        settle_buckets(ddp_model, dataset, args.batch_size, loss_fn, optimizer, ctx)
    preemption, deadline = Preemption(ctx), StepDeadline()
    time.sleep(args.start_delay)  # a slow data loader's warm-up; crash-loop kills its rank inside it
    first_step, loop_started = step, time.perf_counter()
    while step < args.steps:
        started = clock.step_started()
        deadline.start()  # renewed every iteration: it covers the step, the stop vote and a checkpoint
        if ab:
            ab.step_started(step)
        at, indices = data.take(held.position)
        x, y = (t.to(ctx.device) for t in dataset[indices])
        optimizer.zero_grad()
        injected_error.stall()  # a slowed rank's extra work (SIGRTMIN+5), a no-op otherwise
        loss = injected_error.poisoned(loss_fn(ddp_model(x), y))
        loss = finite(loss, ctx.rank, step + 1) if args.check_loss else loss
        loss.backward()
        optimizer.step()
        step += 1
        progress["step"], held.step, held.position = step, step, data.after(at)
        value, busy = loss.item(), clock.busy()
        if args.step_time:
            busy += clock.pace(args.step_time)
        seconds = time.perf_counter() - started
        if ab is None:
            record_step(events, metrics, step, seconds, (at.epoch, indices), value, busy)
        elif ab.on:
            ab.timed(record_step, events, metrics, step, seconds, (at.epoch, indices), value, busy)
        if preemption.agreed():
            if args.ckpt_dir:
                saved(args, ctx, store, model, optimizer, (step, held.position), events, metrics)
                sharded.flush(store, events)
            events.write(Event.EXIT, reason=ExitReason.PREEMPTED, step=step, signalled=preemption.requested)
            say(f"rank {ctx.rank} preempted: checkpointed step {step} and stopped")
            progress["preempted"] = True
            deadline.stop()
            return
        if args.ckpt_dir and args.ckpt_every and step % args.ckpt_every == 0:
            saved(args, ctx, store, model, optimizer, (step, held.position), events, metrics)
    sharded.flush(store, events)
    deadline.stop()
    finish(ctx, model, ab, step - first_step, time.perf_counter() - loop_started, events, step)


def saved(args, ctx: Ctx, store, model, optimizer, place: tuple[int, Position], events, metrics) -> None:
    """The step's checkpoint: one file (ddp), or DCP's folder of shards (fsdp2, lab.workloads.sharded)."""
    step, position = place
    if store is None:
        save_checkpoint(args, ctx, model, optimizer, step, position, events, metrics)
        return
    meta = {"sampler": {**position.to_json(), "seed": args.seed}, "world_size": ctx.world_size}
    sharded.save(store, model, optimizer, step, meta, events)


def held_state(args, ctx: Ctx, attempt, events: EventLog, metrics: RankMetrics | None, held: Held, store=None):
    """The model, optimizer and step this attempt trains from: the newest any rank holds.

    A process's first attempt builds them, from a checkpoint (at the job's start, or in a restart
    of the whole group); a replacement holds nothing and takes a peer's state (Attempt.adopt)."""
    if held.model is None:
        held.model = make_model(args.width).to(ctx.device)
        if args.parallel == "fsdp2":
            sharded.shard(held.model, ctx)
        held.optimizer = torch.optim.SGD(held.model.parameters(), lr=0.01, momentum=0.9)
        held.step = None if attempt.replacement else restore(args, ctx, events, metrics, held, store)
    assert held.optimizer is not None
    step = held.step = attempt.adopt(held.model, held.optimizer, held.step)
    if attempt.adopted_from is not None:
        held.position = handed_over(held.position, attempt.adopted_from)
        events.write(Event.STATE_FROM_PEER, step=step, source=attempt.adopted_from)
    return held.model, held.optimizer, step


def handed_over(position: Position, source: int) -> Position:
    """The data's position of the rank whose state every rank took (a replacement holds none)."""
    box = [position.to_json()]
    dist.broadcast_object_list(box, src=source)
    return Position(**box[0])


def wrapped(model: nn.Module, ctx: Ctx, args, metrics: RankMetrics | None, ab: MonitoringAB | None, clock) -> nn.Module:
    """The model in DDP over this attempt's group, with the timed all-reduce hook: installed with
    or without metrics, so monitoring never changes how the job communicates; it tells the
    step's clock how long the rank waited there."""
    ddp_model = ddp(model, ctx, bucket_cap_mb=args.bucket_cap_mb)
    if ctx.distributed:
        observe = metrics.allreduce_duration.observe if metrics else None
        hook = timed_allreduce_hook(ab.gate(observe) if ab and observe else observe, clock)
        ddp_model.register_comm_hook(None, hook)  # type: ignore[operator]  # DDP's, through a Module type
    return ddp_model


def restore(args, ctx: Ctx, events: EventLog, metrics: RankMetrics | None, held: Held, store) -> int:
    """Load the newest valid checkpoint, if any (lab.workloads.checkpoint, or DCP's for fsdp2);
    the step to go on from."""
    model, optimizer = held.model, held.optimizer
    assert model is not None and optimizer is not None
    if store is not None:
        state = sharded.restore(args, ctx, store, events, model, optimizer)
    elif state := resume(args, ctx, events):
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if state["world_size"] == ctx.world_size:
            set_rng_state(state["rng"][ctx.rank])
        events.write(Event.CHECKPOINT_LOADED, step=state["step"], path=state["path"])
    if not state:
        return 0
    # Where the data goes on: the saved position, whatever world size saved it (a resized job).
    held.position = Position.from_checkpoint(state["sampler"], state["world_size"], args.batch_size)
    if metrics:
        metrics.last_checkpoint_time.set(time.time())
    return int(state["step"])


def finish(ctx: Ctx, model, ab, steps: int, loop_seconds: float, events: EventLog, step: int) -> None:
    """The run's last words: the A/B summary, the speed, and the weights' checksum (the lesson's)."""
    if ab and ctx.rank == 0:
        try:
            say(f"monitoring A/B {json.dumps(ab.summary())}")
        except ValueError as e:
            say(f"monitoring A/B: {e}")
    if ctx.rank == 0 and steps > 0:
        say(f"rank 0 trained {steps} steps in {loop_seconds:.3f} s ({1000 * loop_seconds / steps:.3f} ms/step)")
    checksum = sharded.checksum(model)
    say(
        f"rank {ctx.rank} local_rank {ctx.local_rank} host {ctx.host} "
        f"checksum {checksum:.6f} ({checksum.hex()}) at step {step}"
    )
    events.write(Event.EXIT, reason=ExitReason.COMPLETED, step=step, checksum=checksum.hex())


if __name__ == "__main__":
    main()
