"""One rank of an in-process-recovery job: it survives a peer's death and trains on.

    python -m lab.inprocess.worker --store HOST:PORT --rank R --world-size W [--spare KEY] ...

The rank trains the trainer's model (lab.workloads.trainer's make_model and make_dataset,
SGD with momentum, gradients averaged with all_reduce) in generations: generation G is a
gloo process group over the keeper's store under the prefix `genG/`. When a collective
fails (a peer died: gloo reports "Connection closed by peer" within a fraction of a
second), the rank leaves the group, waits for the keeper to open generation G+1 (key
`genG+1/open`, set once the lost rank has a replacement) and joins it. The new group then
takes its state from a peer instead of a checkpoint: every rank says which step it holds,
and the lowest rank holding the newest sends its parameters, optimizer state and step to
all. The replacement (started as a warm spare, torch already imported, that waits on
`--spare KEY` for its rank and generation) receives it the same way. Work lost: the step
in flight.

Events (lab.health.events) carry the generation as "restart", so the recovery benchmark
reads them as it reads torchrun's restarts; "state_from_peer" stands where a restarted
trainer writes "checkpoint_loaded".
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

from lab.health.events import Event, EventLog, ExitReason
from lab.workloads.trainer import make_dataset, make_model, params_checksum


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lab.inprocess.worker")
    p.add_argument("--store", required=True, help="the keeper's store, HOST:PORT")
    p.add_argument("--rank", type=int, help="this rank (a spare learns it from --spare)")
    p.add_argument("--local-rank", type=int, default=0)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--spare", metavar="KEY", help="start as a warm spare: wait for 'RANK,GENERATION' under KEY")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-time", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--pg-timeout", type=float, default=60.0)
    p.add_argument("--events-dir")
    return p.parse_args(argv)


class Generations:
    """The process groups this rank has been part of, one at a time."""

    def __init__(self, store: dist.Store, rank: int, world_size: int, timeout_s: float):
        self.store, self.rank, self.world_size = store, rank, world_size
        self.timeout = timedelta(seconds=timeout_s)
        self.generation = 0

    def join(self, generation: int) -> float:
        """Form generation's group; the seconds it took."""
        started = time.monotonic()
        self.generation = generation
        prefixed = dist.PrefixStore(f"gen{generation}/", self.store)
        dist.init_process_group(
            "gloo", store=prefixed, rank=self.rank, world_size=self.world_size, timeout=self.timeout
        )
        return time.monotonic() - started

    def leave_and_wait_for_next(self) -> int:
        """Drop the broken group and block until the keeper opens the next generation."""
        try:
            dist.destroy_process_group()
        except RuntimeError:
            pass  # a group whose peer died may refuse a clean teardown; it is gone either way
        nxt = self.generation + 1
        self.store.wait([f"gen{nxt}/open"], self.timeout)
        return nxt


def adopt_state_from_peer(model: nn.Module, optimizer: torch.optim.Optimizer, step: int | None) -> tuple[int, int]:
    """Every rank ends with the state of the lowest rank that holds the newest step.

    step is None on a rank with nothing (a replacement). Returns (step, source rank)."""
    held = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size())]
    dist.all_gather(held, torch.tensor([-1 if step is None else step]))
    steps = [int(t) for t in held]
    newest = max(steps)
    source = steps.index(newest)
    if newest < 0:  # a fresh job: every rank built the same seeded model
        return 0, source
    for p in model.parameters():
        dist.broadcast(p.data, src=source)
    payload = [optimizer.state_dict()]
    dist.broadcast_object_list(payload, src=source)
    optimizer.load_state_dict(payload[0])
    return newest, source


def train_step(model, optimizer, loss_fn, dataset, step: int, rank: int, world_size: int, batch_size: int) -> float:
    start = ((step * world_size + rank) * batch_size) % (len(dataset) - batch_size)
    x, y = dataset[start : start + batch_size]
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    for p in model.parameters():  # what DDP does, spelled out: average the gradients
        dist.all_reduce(p.grad)
        p.grad /= world_size
    optimizer.step()
    return loss.item()


def wait_for_assignment(store: dist.Store, key: str) -> tuple[int, int] | None:
    """A spare's wait for 'RANK,GENERATION' under key; None once the store is gone."""
    try:
        while not store.check([key]):
            time.sleep(0.005)  # a spare may wait longer than any store timeout
        rank, generation = store.get(key).decode().split(",")
    except dist.DistNetworkError:
        return None
    return int(rank), int(generation)


def main(argv=None) -> None:
    args = parse_args(argv)
    host, _, port = args.store.rpartition(":")
    store = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=args.pg_timeout))
    # Built before a spare waits: the optimizer's constructor imports torch._dynamo (0.8 s).
    model = make_model(64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dataset, loss_fn = make_dataset(4096), nn.MSELoss()
    rank, generation = args.rank, 0
    if args.spare:  # ready long before it is needed: torch imported, the store connected
        assignment = wait_for_assignment(store, args.spare)
        if assignment is None:
            return  # the job ended (its store with it) before this spare was needed
        rank, generation = assignment
    os.environ["TORCHELASTIC_RESTART_COUNT"] = str(generation)  # EventLog's "restart": the generation
    events = EventLog(args.events_dir, rank, args.local_rank)
    events.write(Event.START, world_size=args.world_size, steps=args.steps, spare=bool(args.spare))

    groups = Generations(store, rank, args.world_size, args.pg_timeout)
    step: int | None = None if args.spare else 0
    while True:
        seconds = groups.join(generation)
        events.write(Event.RENDEZVOUS_DONE, seconds=seconds, world_size=args.world_size)
        step, source = adopt_state_from_peer(model, optimizer, step)
        if generation:
            events.write(Event.STATE_FROM_PEER, step=step, source=source)
        try:
            while step < args.steps:
                started = time.perf_counter()
                loss = train_step(model, optimizer, loss_fn, dataset, step, rank, args.world_size, args.batch_size)
                step += 1
                time.sleep(max(0.0, args.step_time - (time.perf_counter() - started)))
                events.step(step, loss, time.perf_counter() - started)
            dist.barrier()
            break
        except RuntimeError as e:  # a peer is gone: the group is broken, this rank is not
            events.write(Event.COLLECTIVE_FAILED, step=step, error=str(e).splitlines()[0][-200:])
            generation = groups.leave_and_wait_for_next()
            os.environ["TORCHELASTIC_RESTART_COUNT"] = str(generation)
            events = EventLog(args.events_dir, rank, args.local_rank)
    dist.destroy_process_group()
    events.write(Event.EXIT, reason=ExitReason.COMPLETED, step=step, checksum=params_checksum(model).hex())


if __name__ == "__main__":
    main()
