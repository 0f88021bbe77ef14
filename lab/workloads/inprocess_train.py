"""A DDP training script that recovers in-process: the shape a user's script takes to opt in.

    lab run --recovery in-process --nodes 2 --nproc-per-node 2 lab/workloads/inprocess_train.py --steps 60
    torchrun --nproc-per-node=2 lab/workloads/inprocess_train.py      # the same script, one attempt

It trains the trainer's model on the trainer's data (lab.workloads.trainer: make_model,
make_dataset), each rank's batch a pure function of (step, rank), with SGD and momentum, the
gradients averaged by all_reduce (average_gradients says why not DDP; the lab's trainer is
the same pattern with DDP). The
model, the optimizer and the step live outside the loop of attempts (lab.inprocess.api): when
a peer dies, this rank keeps them, joins the group the keepers re-form, and hands them to the
dead rank's replacement (`attempt.adopt`). No checkpoint is read; the step in flight is the
only work lost. At the end every rank prints its checksum: equal on every rank, and equal to
a run in which no rank died.

With --events-dir (or LAB_EVENTS_DIR) each rank appends its events to rankN.jsonl: start,
rendezvous_done, step, collective_failed (a peer died), state_from_peer (the handover), exit.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from lab.health.events import Event, EventLog, ExitReason
from lab.inprocess.api import attempts
from lab.nodeenv import NodeEnv
from lab.workloads.sharded import checksum as params_checksum
from lab.workloads.trainer import make_dataset, make_model


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="a DDP script that recovers in-process (lab.inprocess)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-time", type=float, default=0.0, help="pace each step to at least this many seconds")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--events-dir", default=NodeEnv.parse().events_dir)
    args = p.parse_args(argv)
    if args.steps < 1 or args.step_time < 0 or args.batch_size < 1:
        p.error("--steps and --batch-size must be >= 1, --step-time >= 0")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    events = EventLog(args.events_dir, rank, int(os.environ.get("LOCAL_RANK", 0)))
    events.write(Event.START, world_size=world, steps=args.steps)
    # What survives a lost peer: built once, before the first attempt. A replacement rank holds
    # nothing yet (step None) and takes all of it from a peer.
    model = make_model(64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dataset, loss_fn = make_dataset(4096), nn.MSELoss()
    step: int | None = None if NodeEnv.parse().inprocess_generation else 0
    for attempt in attempts():
        with attempt:
            if attempt.in_process:  # under torchrun, the restart count torchrun gave
                events.restart(attempt.generation)
            events.write(Event.RENDEZVOUS_DONE, seconds=attempt.join_seconds, world_size=world)
            step = attempt.adopt(model, optimizer, step)
            if attempt.adopted_from is not None:
                events.write(Event.STATE_FROM_PEER, step=step, source=attempt.adopted_from)
            while step < args.steps:
                started = time.perf_counter()
                start = ((step * world + rank) * args.batch_size) % (len(dataset) - args.batch_size)
                x, y = dataset[start : start + args.batch_size]
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                average_gradients(model, attempt.distributed)
                optimizer.step()
                step += 1
                time.sleep(max(0.0, args.step_time - (time.perf_counter() - started)))
                events.step(step, loss.item(), time.perf_counter() - started)
        if attempt.peer_lost:
            events.write(Event.COLLECTIVE_FAILED, step=step, error=attempt.peer_lost)
    checksum = params_checksum(model)
    print(f"rank {rank} checksum {checksum:.6f} ({checksum.hex()}) at step {step}", flush=True)
    events.write(Event.EXIT, reason=ExitReason.COMPLETED, step=step, checksum=checksum.hex())


def average_gradients(model: nn.Module, distributed: bool) -> None:
    """What DDP does, spelled out: every rank ends the backward with the mean gradient.

    Spelled out so a recovered run ends bit-identical to one that lost no rank: a DDP made
    afresh after a regroup starts in its initial bucket layout, and with more than two ranks
    the all-reduce's summation order then differs in the last bits from the uninterrupted
    run's rebuilt layout. The lab's trainer keeps DDP and settles the layout with one
    throw-away backward in every attempt (lab.workloads.distributed.settle_buckets)."""
    if not distributed:
        return
    for p in model.parameters():
        assert p.grad is not None
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


if __name__ == "__main__":
    main()
