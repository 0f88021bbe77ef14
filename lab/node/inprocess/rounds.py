"""In-process recovery's fallback: the keepers restart the whole group, agreed through the store.

A spare can take a dead rank's place. It cannot take a living one's: a rank that hangs in
Python (a deadlock, a data loader that never answers) still beats (lab.inprocess.heartbeat),
holds its place and its connections, and its peers' collectives time out. Each such peer
leaves with heartbeat.TIMED_OUT_EXIT (lab.inprocess.lookout.leave_timed_out), and its keeper
asks for a round: every keeper then stops every rank it holds, the hung one with them, and
starts them afresh, as at the job's start, in a generation of their own; they load the
script's checkpoint (`attempt.replacement` is False), so the steps since it are lost, as in a
restart. What it costs is the process-group timeout, the start and the steps redone. A node
lost whole ends in a round too, once its keeper comes back (lab.node.inprocess.fallback).

The store holds the rounds: `rounds` counts those asked; `roundN/asked` makes the first
keeper to ask for round N the one that opens it (the others' asks for the same round, made
on the same hang, count for nothing); `roundN/generation` and `roundN/why` say where its
ranks start and why, and `roundN/open`, written last, opens it. Each keeper waits for the
next round's `open` on a connection of its own, in a thread: the store wakes it, so a keeper
hears of a round within milliseconds and asks the store nothing while none comes (polling
for it ten times a second was most of a keeper's store calls: `lab bench scale`). close()
ends that wait before the keeper exits: a thread still in the store's wait when the
interpreter finalizes, and the store then gone, aborts the process (status -6, measured).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from lab.inprocess import lookout

WAIT_LIMIT = timedelta(days=7)  # a job's whole life: a round may come at any time


@dataclass(frozen=True)
class Round:
    number: int
    generation: int  # where the restarted ranks start (the newest then)
    why: str


Connect = Callable[[], tuple[object, Callable[[], None]]]  # a new client of the store, and how to end its wait


def connecting(address: str) -> Connect:
    """A keeper's Connect to the store at HOST:PORT: a client of its own (a client is not shared
    between threads), ended by shutting its connection down."""

    def connect() -> tuple[object, Callable[[], None]]:
        import torch.distributed as dist  # a keeper imports torch once its fork server started (--preload)

        host, _, port = address.rpartition(":")
        before = lookout.sockets()
        client = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=120))
        connection = lookout.opened_since(before)
        return client, lambda: lookout.shut_down(connection)

    return connect


class Rounds:
    """One keeper's view of the job's restarts of its whole group."""

    def __init__(self, store, connect: Connect):
        self.store, self.connect = store, connect
        self.carried_out = 0  # the rounds this keeper has restarted its ranks for
        self._armed: tuple[int, threading.Event] | None = None  # the round awaited, and its wake-up
        self._waiting: list[tuple[threading.Thread, Callable[[], None]]] = []  # each wait's thread, and its end

    def ask(self, why: str) -> None:
        """Ask for the round after the last one this keeper carried out; the first to ask opens it."""
        number = self.carried_out + 1
        if int(self.store.add(f"round{number}/asked", 1)) != 1:
            return  # another keeper asked first, on the same hang
        generation = int(self.store.add("generation", 1))
        self.store.set(f"round{number}/generation", str(generation))
        self.store.set(f"round{number}/why", why)
        self.store.add("rounds", 1)
        self.store.set(f"round{number}/open", b"1")  # last: a keeper that hears of the round finds all of it

    def heard(self) -> Round | None:
        """The next round this keeper has not carried out yet, once it is open; None."""
        number = self.carried_out + 1
        if self._armed is None or self._armed[0] != number:  # at the start, after a round, after a rejoin
            self._armed = (number, self._await(f"round{number}/open"))
        if not self._armed[1].is_set():
            return None
        self.carried_out = number
        generation = int(self.store.get(f"round{number}/generation"))
        return Round(number, generation, self.store.get(f"round{number}/why").decode())

    def _await(self, key: str) -> threading.Event:
        opened = threading.Event()
        client, end = self.connect()

        def wait() -> None:
            try:
                client.wait([key], WAIT_LIMIT)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - closed, or the store is gone: the keeper hears that on its own calls
                return
            opened.set()

        thread = threading.Thread(target=wait, name=f"lab-keeper-{key}", daemon=True)
        thread.start()
        self._waiting.append((thread, end))
        return opened

    def close(self) -> None:
        """End every wait for a round: its connection shut down, its thread gone."""
        for thread, end in self._waiting:
            if thread.is_alive():
                end()
                thread.join(5)
        self._waiting.clear()
