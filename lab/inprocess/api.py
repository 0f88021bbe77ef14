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

Under in-process recovery (`lab run`'s default for such a script) each node runs a keeper
(lab.node.inprocess.keeper), not torchrun's agent. When a rank dies, its keeper opens the next
generation within milliseconds; each attempt's lookout (lab.inprocess.lookout) sees that and
shuts its group's connections down, so the collective every other rank is in, or its next one,
fails at once ("Connection closed by peer"): the `with` block ends quietly, the rank drops the
broken group and waits while its keeper hands the dead rank's place to a warm spare (a process
with torch imported, already connected to the store); the loop's next attempt joins the new
group, and `adopt` hands every rank, the spare included, the model and optimizer of the lowest
rank holding the newest step. Nothing is read from disk, and at most the step in flight is
lost. Keep the model and optimizer outside the loop: they are what survives. A rank that dies
while the others regroup opens one more generation, and a join still waiting for it gives up at
once and joins that one.

Under plain torchrun (or another --recovery) there is one attempt: it joins the group from
torchrun's environment, `adopt` agrees on the step, and errors propagate as they always did;
without torchrun (no RANK), one attempt with no group: `attempt.distributed` is False.

A hang is not a death: a hung rank keeps its connections open, so its peers wait out the
process-group timeout (gloo's abort() does not free a pending collective either). A frozen rank
(stopped, or holding the GIL) stops beating, and its keeper kills it well before that
(lab.inprocess.heartbeat). A rank hung in Python still beats: its peers' collectives time out,
each leaves with heartbeat.TIMED_OUT_EXIT, and the keepers restart the whole group
(lab.node.inprocess.rounds): every rank starts afresh and loads the script's checkpoint
(`attempt.replacement` is False).
"""

from __future__ import annotations

import functools
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

from lab.inprocess import group, handover, lookout
from lab.inprocess.lookout import Lookout
from lab.nodeenv import NodeEnv


def attempts() -> Iterator[Attempt]:
    """The attempts of this rank's training: one, unless a peer dies under in-process recovery."""
    wire = NodeEnv.parse()
    if not wire.inprocess_store:
        yield Attempt(None, wire, generation=0)
        return
    store, store_sockets = _connect(wire)
    # The newest generation: a replacement's (a second death may have opened one after its own),
    # or a restart's (lab.node.inprocess.rounds); 0 at the job's start.
    generation = int(store.add("generation", 0))
    # What exists now (torch, the script's imports, its model) is kept out of the collections an
    # attempt that lost its group runs: measured, 0.22-0.30 s of a 0.5 s recovery; frozen, 0.04-0.07 s.
    gc.freeze()
    while True:
        attempt = Attempt(store, wire, generation, store_sockets)
        try:
            yield attempt
        except GeneratorExit:  # the script left the loop (a break, a return)
            if attempt.peer_lost is not None:  # its peers would wait for it in the next generation
                lookout.leave_abandoned(os.environ.get("RANK", "?"), attempt.generation, attempt.peer_lost)
            raise
        if attempt.peer_lost is None:
            return
        assert attempt.store is not None
        store, store_sockets = attempt.store, attempt.store_sockets
        generation = attempt.next_generation()


def _connect(wire: NodeEnv) -> tuple[dist.TCPStore, dict[int, str]]:
    """A client of the job's store, and its connection (the sockets it opened)."""
    host, _, port = (wire.inprocess_store or "").rpartition(":")
    before = lookout.sockets()
    store = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=wire.pg_timeout_s or 60))
    return store, lookout.opened_since(before)


class Attempt:
    """One generation of the job's process group, as a context: it joins on entry and leaves on exit."""

    def __init__(
        self, store: dist.TCPStore | None, wire: NodeEnv, generation: int, store_sockets: dict[int, str] | None = None
    ):
        self.store, self.wire, self.generation = store, wire, generation
        self.store_sockets = store_sockets or {}  # the store client's connection
        self.phase = "new"  # joining, in, left: what the lookout does when the next generation opens
        self._phase_lock = threading.Lock()
        self.peer_lost: str | None = None  # the error that ended this attempt, when a peer died
        self.join_seconds = 0.0
        self._main_thread = threading.get_ident()  # the thread that trains: the one a lookout may find stranded
        self.adopted_from: int | None = None  # the rank whose state this attempt took, when it took one
        self._group_sockets: dict[int, str] = {}  # the connections it opened to join the group: fd -> inode
        self._join_began: dict[int, str] = {}  # the sockets open when its last join began
        self._joins = 0  # the joins this attempt began (one more for each generation opened during one)

    @property
    def in_process(self) -> bool:
        return self.store is not None

    @property
    def distributed(self) -> bool:
        return self.in_process or "RANK" in os.environ

    @property
    def replacement(self) -> bool:
        """This process took a lost rank's place among survivors: a peer holds the state (adopt
        hands it over), so it loads no checkpoint. False at the job's start and in a restart."""
        return self.wire.inprocess_generation is not None

    def __enter__(self) -> Attempt:
        if not self.distributed or dist.is_initialized():
            return self
        backend = self.wire.backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":  # this rank's GPU, before any CUDA tensor: otherwise every rank's lands on GPU 0
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        started = time.monotonic()
        if self.store is None:
            dist.init_process_group(backend, timeout=self._timeout)
        else:
            self._join_newest(backend)
        self.join_seconds = time.monotonic() - started
        return self

    @property
    def _timeout(self) -> timedelta:
        return timedelta(seconds=self.wire.pg_timeout_s or 60)

    def _join_newest(self, backend: str) -> None:
        """Join this generation's group; when the next one opens meanwhile (a death during the
        regroup), join that one instead, until a join holds."""
        assert self.store is not None
        while True:
            # Set before the lookout exists: it may fire at once, and must not shut down what came before.
            with self._phase_lock:
                self.phase, self._join_began = "joining", lookout.sockets()
                self._joins += 1
            joins = self._joins
            watch = Lookout(self.store, self.generation, functools.partial(self._next_opened, joins))
            before = lookout.sockets()  # the group's connections are those opened after the lookout's
            try:
                self._join(backend, before)
                with self._phase_lock:
                    if watch.opened.is_set():
                        raise group.Superseded
                    self.phase = "in"
                return
            except (group.Superseded, RuntimeError, ValueError) as error:  # DistError is a RuntimeError
                with self._phase_lock:
                    self.phase = "left"
                # A lapsed join already waited its timeout: the next generation opened by now, or never will.
                if not watch.opened.wait(0 if isinstance(error, group.Absent) else self._timeout.total_seconds()):
                    if isinstance(error, group.Absent):  # no round brings back a node that is gone
                        lookout.leave_absent(os.environ["RANK"], self.generation, error.came, error.waited_s)
                    if group.TIMED_OUT.search(str(error)):  # a peer that never came: it hangs
                        lookout.leave_timed_out(os.environ["RANK"], self.generation, "joining", group.first_line(error))
                    raise error  # no death behind it: the join failed of its own
            if dist.is_initialized():
                group.destroy_quietly()  # which also sets torch's count of groups back to 0
            else:
                group.forget_failed_join()
            self.store, self.store_sockets = _connect(self.wire)  # the old one's may have been shut down
            left, self.generation = self.generation, int(self.store.add("generation", 0))
            lookout.say_joins_next(os.environ["RANK"], left, self.generation)

    def _join(self, backend: str, before: dict[int, str]) -> None:
        # Each generation's group lives under its own prefix, so nothing a dead group left in the
        # store (its ranks' addresses) is read by the new one.
        assert self.store is not None
        os.environ["TORCHELASTIC_RESTART_COUNT"] = str(self.generation)
        prefixed = dist.PrefixStore(f"gen{self.generation}/", self.store)
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        # All come first, however late a fresh one starts: init_process_group waits the collectives' timeout.
        group.await_everyone(prefixed, world, self.wire.inprocess_join_timeout_s or 120.0)
        try:
            dist.init_process_group(backend, store=prefixed, rank=rank, world_size=world, timeout=self._timeout)
        finally:
            self._group_sockets = lookout.opened_since(before)

    def _next_opened(self, join: int) -> None:
        """The lookout's call, on its thread, when the generation after the one of `join` (this
        attempt's count of joins when it began) opens."""
        with self._phase_lock:
            phase = self.phase if join == self._joins else "left"  # a later join is not this lookout's
            if phase == "joining":  # the join's waits on the store fail at once
                lookout.shut_down({**self.store_sockets, **lookout.opened_since(self._join_began)})
            elif phase == "in":  # the collective fails at once (module docstring: why the read side only)
                lookout.shut_down(self._group_sockets, socket.SHUT_RD)
        if phase == "in":
            still_in, connections, where = (lambda: self.phase == "in"), self._group_sockets, lookout.STRANDED_IN
        elif phase == "joining":
            still_in, connections = (lambda: self.phase == "joining" and self._joins == join), None
            where = lookout.STRANDED_JOINING
        else:
            return
        idle = lookout.stranded(self._main_thread, still_in, connections)
        if idle is not None:
            rank = os.environ.get("RANK", "?")
            lookout.leave_stranded(rank, self.generation, idle, where.format(generation=self.generation))

    def __exit__(self, kind, error, tb) -> bool:
        with self._phase_lock:
            self.phase = "left"
        lost = self.in_process and error is not None and group.a_peer_died(error)
        if self.in_process and not lost and error is not None and group.TIMED_OUT.search(str(error)):
            lookout.leave_timed_out(
                os.environ.get("RANK", "?"), self.generation, "a collective", group.first_line(error)
            )
        if lost:
            # The failed frames still hold what holds the group (a DDP model): let them go, so the
            # group's connections close with it and a peer waiting on this rank (not on the dead
            # one) fails at once instead of at the process-group timeout. (gloo's abort() does not
            # close them: measured.)
            traceback.clear_frames(tb)
            lookout.shut_down(self._group_sockets)
        gc.collect()  # free what holds the group (a DDP model) before the group goes
        if dist.is_initialized():
            if error is None:
                dist.barrier()  # nobody tears down while a peer is still in a collective
            group.destroy_quietly()
        if lost:
            self.peer_lost = group.first_line(error)
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
        newest, self.adopted_from = handover.newest_state(model, optimizer, step)
        if newest < 0 and self.in_process:  # nobody holds it: the checkpoint does (lookout says why)
            lookout.leave_without_state(os.environ.get("RANK", "?"), self.generation)
        return max(newest, 0)
