"""The keepers of one in-process job hear each other through its store, so a keeper that is gone is seen.

A keeper's ranks die with it (PR_SET_PDEATHSIG), and a fixed-size job cannot regroup without
them. The other keepers act only on their own children's deaths, so their ranks would wait for
a generation nobody opens, for ever: measured, node 1's keeper SIGKILLed and node 0's keeper
still running 90 s later. So each keeper bumps a counter in the store every BEAT_S and watches
the others'. One whose counter has not moved for silent_s, and that never said it was done, is
gone: the others stop their ranks and wait for it to come back (lab.node.inprocess.fallback), and
judge it again once its counter moves (a keeper started anew goes on from the stored count).
The counter is a count, not a time: the nodes' clocks need not agree, and each keeper times
the others on its own clock.

At the end each keeper says it is done. Node 0's keeper hosts the store, so it waits for the
others' word (or their silence) before it exits: no keeper then finds the store gone while its
own last ranks finish.
"""

from __future__ import annotations

import time
from collections.abc import Callable

BEAT_S = 0.5


class KeeperLost(Exception):
    def __init__(self, node: int, silent_s: float):
        super().__init__(f"node {node}'s keeper")
        self.node, self.silent_s = node, silent_s


class RollCall:
    def __init__(self, store, node: int, nodes: int, silent_s: float, clock: Callable[[], float] = time.monotonic):
        self.store, self.node, self.nodes, self.silent_s, self.clock = store, node, nodes, silent_s, clock
        self.count = 0
        self.heard: dict[int, tuple[bytes, float]] = {}  # node -> (its counter, when this keeper saw it move)
        self.gone: dict[int, bytes] = {}  # node -> its counter when it was lost: not judged until it moves
        self.next_at = 0.0

    @staticmethod
    def key(node: int, what: str) -> str:
        return f"keeper/node{node}/{what}"

    def beat(self) -> None:
        """Move this keeper's counter now (a keeper back on its node: at once, with its ask for a
        round, so the others never judge it by its predecessor's silence after hearing it)."""
        self.next_at = self.clock() + BEAT_S
        self.count += 1
        self.store.set(self.key(self.node, "beat"), str(self.count))

    def tick(self) -> None:
        """Beat, and raise KeeperLost for a keeper silent silent_s; does something at most every BEAT_S."""
        now = self.clock()
        if now < self.next_at:
            return
        self.beat()
        lost = self.silent(now)
        if lost is not None:
            raise KeeperLost(*lost)

    def silent(self, now: float) -> tuple[int, float] | None:
        """(node, seconds) of a keeper not done whose counter has not moved for silent_s."""
        for node in range(self.nodes):
            if node == self.node or self.store.check([self.key(node, "done")]):
                continue
            if not self.store.check([self.key(node, "beat")]):
                continue  # not started yet: a keeper is judged once it has beaten
            value = self.store.get(self.key(node, "beat"))
            if self.gone.get(node) == value:
                continue  # still gone: not lost again (lab.node.inprocess.fallback waits for it)
            self.gone.pop(node, None)
            last = self.heard.get(node)
            if last is None or last[0] != value:
                self.heard[node] = (value, now)
            elif now - last[1] >= self.silent_s:
                return node, now - last[1]
        return None

    def away(self, node: int) -> None:
        """A lost node's keeper is not judged again until it beats again (its keeper started anew)."""
        self.gone[node] = self.heard.pop(node)[0]

    def finish(self) -> None:
        """Say this keeper is done; node 0's, the store's host, then waits until every other keeper
        has said so too, or has fallen silent."""
        self.store.set(self.key(self.node, "done"), "1")
        if self.node != 0:
            return
        others = [self.key(node, "done") for node in range(self.nodes) if node != self.node]
        while others and not self.store.check(others):
            try:
                self.tick()
            except KeeperLost:
                return
            time.sleep(0.02)
