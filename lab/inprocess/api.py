"""In-process recovery for a training script: when a rank dies, the others stay where they are.

A script opts in by training inside a loop of attempts:

    from lab.inprocess import attempts

    model, optimizer, step = make_model(), make_optimizer(), 0
    for attempt in attempts():                        # one per generation of the process group
        with attempt:                                 # joins it
            step = attempt.adopt(model, optimizer, step)  # the newest state any rank holds
            ddp_model = DDP(model)                    # a fresh DDP over each fresh group
            while step < steps:
                ...                                   # train as usual
                step += 1

Under `lab up --recovery in-process` each node runs a keeper (lab.inprocess.keeper) instead of
torchrun's agent. When a rank dies, its keeper opens the next generation within milliseconds;
each attempt watches the store for that and shuts its group's connections down, so the
collective every other rank is in, or its next one, fails at once ("Connection closed by
peer"): the `with` block ends quietly, the rank drops the
broken group and waits while its keeper hands the dead rank's place to a warm spare (a process
with torch imported, already connected to the store); the loop's next attempt joins the new
group, and `adopt` hands every rank, the spare included, the model and optimizer of the
lowest rank holding the newest step. Nothing is read from disk, and at most the step in flight
is lost. Keep the model and optimizer outside the loop: they are what survives.

Under plain torchrun (or `lab up` with another --recovery) there is one attempt: it joins the
group from torchrun's environment, `adopt` agrees on the step (a no-op after a checkpoint load),
and errors propagate as they always did. A script without torchrun at all (no RANK) gets one
attempt with no group: `attempt.distributed` is False.

When an attempt ends on a lost peer, the rank shuts down the connections it opened to join
that group (_shut_down says why: on torch 2.13 a DDP or a comm hook whose all-reduce failed
keeps the group alive, and a rank waiting on this one would sit out the whole process-group
timeout).

A hang is not a death: a rank stuck in a collective keeps its connections open, so its peers
wait out the process-group timeout and then fail with a timeout, which an attempt does not
swallow (gloo's abort() does not free a pending collective either: docs/benchmarks.md). A
frozen rank (stopped, or holding the GIL) stops beating, and its keeper kills it well before
that (lab.inprocess.heartbeat); a rank that hangs in Python is left to the timeout, and a job
that may hang so wants --recovery restart.
"""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

from lab.nodeenv import NodeEnv

# What a collective raises when a peer's process is gone (gloo on Linux): the errors an attempt
# ends quietly on. Anything else (a timeout, the script's own bug) propagates.
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Connection refused")
# A watch waits on the store this long at most; one whose attempt ended normally is left blocked,
# a daemon thread (waking it early would mean polling, and torch logs every wait that times out).
WATCH_LIMIT = timedelta(days=7)


def attempts() -> Iterator[Attempt]:
    """The attempts of this rank's training: one, unless a peer dies under in-process recovery."""
    wire = NodeEnv.parse()
    if not wire.inprocess_store:
        yield Attempt(None, wire, generation=0)
        return
    host, _, port = wire.inprocess_store.rpartition(":")
    timeout = timedelta(seconds=wire.pg_timeout_s or 60)
    store = dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
    # A replacement joins the newest generation: a second death may have opened one after its own.
    generation = int(store.add("generation", 0)) if wire.inprocess_generation else 0
    # What exists now (torch, the script's imports, its model) is kept out of the collections an
    # attempt that lost its group runs to free that group: measured, one full collection then took
    # 0.22-0.30 s of a 0.5 s recovery; with these frozen, 0.04-0.07 s.
    gc.freeze()
    while True:
        attempt = Attempt(store, wire, generation)
        yield attempt
        if attempt.peer_lost is None:
            return
        generation = attempt.next_generation()


class Attempt:
    """One generation of the job's process group, as a context: it joins on entry and leaves on exit."""

    def __init__(self, store: dist.TCPStore | None, wire: NodeEnv, generation: int):
        self.store, self.wire, self.generation = store, wire, generation
        self._left = threading.Event()  # set when the attempt ends: its watch stops
        self.peer_lost: str | None = None  # the error that ended this attempt, when a peer died
        self.join_seconds = 0.0
        self.adopted_from: int | None = None  # the rank whose state this attempt took, when it took one
        self._group_sockets: dict[int, str] = {}  # the connections it opened to join the group: fd -> inode

    @property
    def in_process(self) -> bool:
        return self.store is not None

    @property
    def distributed(self) -> bool:
        return self.in_process or "RANK" in os.environ

    def __enter__(self) -> Attempt:
        if not self.distributed or dist.is_initialized():
            return self
        backend = self.wire.backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":  # this rank's GPU, before any CUDA tensor: otherwise every rank's lands on GPU 0
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        timeout = timedelta(seconds=self.wire.pg_timeout_s or 60)
        started = time.monotonic()
        before = _sockets()
        if self.store is not None:  # in-process
            # Each generation's group lives under its own prefix, so nothing the dead group left
            # in the store (its ranks' addresses) is read by the new one.
            os.environ["TORCHELASTIC_RESTART_COUNT"] = str(self.generation)
            prefixed = dist.PrefixStore(f"gen{self.generation}/", self.store)
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            dist.init_process_group(backend, store=prefixed, rank=rank, world_size=world, timeout=timeout)
        else:
            dist.init_process_group(backend, timeout=timeout)
        self.join_seconds = time.monotonic() - started
        self._group_sockets = {fd: inode for fd, inode in _sockets().items() if before.get(fd) != inode}
        if self.store is not None:
            threading.Thread(target=self._watch, args=(self.store,), name="lab-inprocess-watch", daemon=True).start()
        return self

    def _watch(self, store: dist.TCPStore) -> None:
        """End this generation's connections the moment the keeper opens the next one.

        The keeper sees a rank die within milliseconds and opens the next generation. Left to
        gloo, a rank learns of the death only in its next collective, and one that does not
        talk to the dead rank directly waits for a peer that does to fail first and close its
        connections (measured: 0.09 s behind the first, on top of the time to the next
        collective). Shutting its own connections down fails this rank's collective at once,
        the one it is in or its next."""
        try:  # a connection of its own: a store client is not shared between threads
            lookout = dist.TCPStore(store.host, store.port, is_master=False, timeout=WATCH_LIMIT)
            lookout.wait([f"gen{self.generation + 1}/open"], WATCH_LIMIT)
        except Exception:  # noqa: BLE001 - the store is gone: gloo still sees the death, later
            return
        if not self._left.is_set():  # an attempt that ended leaves its next one alone
            _shut_down(self._group_sockets)

    def __exit__(self, kind, error, tb) -> bool:
        self._left.set()
        lost = self.in_process and error is not None and _a_peer_died(error)
        if lost:
            # The failed frames still hold what holds the group (a DDP model): let them go, so the
            # group's connections close with it and a peer waiting on this rank (not on the dead
            # one) fails at once instead of at the process-group timeout. (gloo's abort() does not
            # close them: measured.)
            traceback.clear_frames(tb)
            _shut_down(self._group_sockets)
        gc.collect()  # free what holds the group (a DDP model) before the group goes
        if dist.is_initialized():
            if error is None:
                dist.barrier()  # nobody tears down while a peer is still in a collective
            try:
                dist.destroy_process_group()
            except RuntimeError:
                pass  # a group whose peer died may refuse a clean teardown; it is gone either way
        if lost:
            first = str(error).strip().splitlines()[0]
            self.peer_lost = first.split("] ", 1)[-1][:200]  # without gloo's source-file prefix
        return lost

    def next_generation(self) -> int:
        """Block until the keeper opens a generation after this one; the newest open one.

        Two deaths close together open two generations; every rank joins the newest."""
        assert self.store is not None
        timeout = timedelta(seconds=self.wire.pg_timeout_s or 60)
        self.store.wait([f"gen{self.generation + 1}/open"], timeout)
        time.sleep(0.05)  # a second death in the same instant opens the next one: let it land
        return int(self.store.add("generation", 0))

    def adopt(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, step: int | None) -> int:
        """Every rank ends with the state of the lowest rank that holds the newest step.

        step: the step this rank's model holds (None: nothing yet, a replacement before any
        checkpoint). Returns the step every rank now holds. Without a group: step as given."""
        if not dist.is_initialized():
            return step or 0
        device = next(model.parameters()).device
        held = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(dist.get_world_size())]
        dist.all_gather(held, torch.tensor([-1 if step is None else step], device=device))
        steps = [int(t) for t in held]
        newest = max(steps)
        if newest < 0 or steps.count(newest) == len(steps):
            return max(newest, 0)  # every rank holds the same step: nothing to hand over
        source = steps.index(newest)
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=source)
        if optimizer is not None:
            payload = [optimizer.state_dict()]
            dist.broadcast_object_list(payload, src=source)
            optimizer.load_state_dict(payload[0])
        self.adopted_from = source
        return newest


def _sockets() -> dict[int, str]:
    """This process's open sockets: fd -> the kernel's inode ("socket:[1234]")."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed while we looked
        if target.startswith("socket:"):
            found[int(name)] = target
    return found


def _shut_down(group_sockets: dict[int, str]) -> None:
    """End this rank's side of a broken group's connections, now.

    Measured on torch 2.13 with gloo: a DDP whose all-reduce failed mid-backward (or a Python comm
    hook's failed future) keeps the group alive after destroy_process_group, its connections open,
    and a peer waiting on this rank (not on the dead one) then sits out the whole process-group
    timeout. gloo's abort() does not close them either. So the rank shuts down the connections it
    opened while joining the group (told apart by their inodes: an fd number since reused for
    something else is left alone), not the listening socket (gloo's listener thread aborts the
    process when its accept() fails); the peers' next read fails at once."""
    live = _sockets()
    for fd, inode in group_sockets.items():
        if live.get(fd) != inode:
            continue
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):  # gloo's listener aborts
                    sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the other side, or not a connected stream


def _a_peer_died(error: BaseException) -> bool:
    text = str(error)
    return isinstance(error, RuntimeError | ConnectionError) and any(cause in text for cause in PEER_LOST)
