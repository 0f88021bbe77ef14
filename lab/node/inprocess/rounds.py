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
ranks start and why. A keeper waiting for a round (it asked for one, or it waits for a lost
keeper to come back) hears of it within POLL_S; one with nothing amiss polls every IDLE_POLL_S.
Little is lost by that: a round is asked because ranks timed out in a collective, which (in a DDP
job) every node's ranks were in, so every keeper's own ranks time out too and it asks (the same
round) and then polls fast; a lost keeper is heard by all through the roll call. At worst (ranks
of a node not in the hung collective) a keeper hears a round a second late. Polling for rounds ten
times a second was 10 of a keeper's 22-26 store calls a second, the share that would have filled
the store first (`lab bench scale`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

POLL_S = 0.1  # while waiting for a round
IDLE_POLL_S = 1.0  # with nothing amiss


@dataclass(frozen=True)
class Round:
    number: int
    generation: int  # where the restarted ranks start (the newest then)
    why: str


class Rounds:
    """One keeper's view of the job's restarts of its whole group."""

    def __init__(self, store):
        self.store = store
        self.carried_out = 0  # the rounds this keeper has restarted its ranks for
        self.asked_for = 0  # the newest round this keeper asked for
        self._last_poll = float("-inf")

    def ask(self, why: str) -> None:
        """Ask for the round after the last one this keeper carried out; the first to ask opens it."""
        number = self.carried_out + 1
        self.asked_for = max(self.asked_for, number)
        if int(self.store.add(f"round{number}/asked", 1)) != 1:
            return  # another keeper asked first, on the same hang
        generation = int(self.store.add("generation", 1))
        self.store.set(f"round{number}/generation", str(generation))
        self.store.set(f"round{number}/why", why)
        self.store.add("rounds", 1)  # last: a keeper that hears of the round finds all of it

    def heard(self, now: float | None = None, waiting: bool = False) -> Round | None:
        """The next round this keeper has not carried out yet, once it is open; None. waiting: it
        waits for a round (a lost keeper's); one it asked for is waited for anyway."""
        now = time.monotonic() if now is None else now
        fast = waiting or self.asked_for > self.carried_out
        if now - self._last_poll < (POLL_S if fast else IDLE_POLL_S):
            return None
        self._last_poll = now
        if int(self.store.add("rounds", 0)) <= self.carried_out:
            return None
        self.carried_out += 1
        number = self.carried_out
        generation = int(self.store.get(f"round{number}/generation"))
        return Round(number, generation, self.store.get(f"round{number}/why").decode())
