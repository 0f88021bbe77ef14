"""Keepers cut apart and healed (lab.node.inprocess.fallback on a real TCPStore): each judged the
other lost, so each stopped its ranks and waited for the other to come back as a keeper started
anew, which never happens; `lab chaos --mix partition-node` found both waiting out their 120 s.
Each now asks for a round once the other beats again, and the two asks open one round."""

from __future__ import annotations

import argparse
import threading

import pytest
import torch.distributed as dist

from lab.node.inprocess.fallback import Fallback
from lab.node.inprocess.roll_call import KeeperLost, RollCall
from lab.node.inprocess.rounds import Round, Rounds


class Waiting(Fallback):
    """A keeper's fallback alone: its ranks, spare and events are not this test's."""

    def __init__(self, store, node: int, nodes: int = 2, return_timeout: float = 20.0):
        self.args = argparse.Namespace(node_rank=node, return_timeout=return_timeout, max_replacements=3)
        self.store, self.ranks, self.timed_out, self.replacements = store, {}, set(), 0
        self.roll, self.rounds = RollCall(store, node, nodes, 1.0), Rounds(store)
        self.restarted: list[Round] = []
        self.stopped = False

    def restart_all(self, heard: Round) -> bool:
        self.restarted.append(heard)
        return True

    def _record_event(self, name, **metadata) -> None:
        pass

    def stop(self, grace_s: float = 5.0) -> None:
        self.stopped = True


@pytest.fixture
def store():
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def lost_as_seen_now(store, node: int) -> KeeperLost:
    return KeeperLost(node, 5.0, store.get(RollCall.key(node, "beat")))


def test_two_keepers_that_judged_each_other_lost_restart_together_once_both_beat_again(store):
    keepers = [Waiting(store, 0), Waiting(store, 1)]
    for keeper in keepers:
        keeper.roll.beat()
    losses = [lost_as_seen_now(store, 1), lost_as_seen_now(store, 0)]  # the partition: each saw the other fall silent
    came_back: dict[int, bool] = {}
    threads = [
        threading.Thread(target=lambda k=k, lost=lost: came_back.setdefault(k.args.node_rank, k.outlive(lost)))
        for k, lost in zip(keepers, losses, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert came_back == {0: True, 1: True} and not any(k.stopped for k in keepers)
    assert [k.restarted for k in keepers] == [[keepers[0].restarted[0]]] * 2  # one round, heard by both
    assert int(store.add("rounds", 0)) == 1 and "beats again" in keepers[0].restarted[0].why


class BeatHook:
    """The store, with a moment to act right after node 1's beat is written."""

    def __init__(self, store, then):
        self.store, self.then = store, then

    def __getattr__(self, name):
        return getattr(self.store, name)

    def set(self, key, value):
        self.store.set(key, value)
        if key == RollCall.key(1, "beat"):
            self.then()


def test_a_keeper_started_anew_and_the_keeper_that_waited_for_it_ask_for_the_same_round(store):
    """The waiting keeper asks the moment the new keeper's first beat lands, before the new one has
    asked for its own: read after that beat, the new keeper's count of rounds named the next round,
    and every rank restarted twice."""
    RollCall(store, 1, 2, 1.0).beat()  # the old keeper's last beat
    waiter = Waiting(store, 0)
    lost = lost_as_seen_now(store, 1)
    back = Waiting(BeatHook(store, lambda: waiter.rounds.ask("node 1's keeper beats again")), 1)
    assert back.rejoin()
    assert int(store.add("rounds", 0)) == 1
    assert waiter.outlive(lost) and waiter.restarted[0].number == 1
