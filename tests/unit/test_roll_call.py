"""The keepers' roll call (lab.node.inprocess.roll_call) on a real TCPStore, with each keeper's clock
given: a keeper that stops beating is judged gone after silent_s of its peer's own clock; one
that said it was done, or has not beaten yet, is never judged; node 0 waits for the others; a loss
one keeper sees is heard by all, once; and a keeper's store traffic does not grow with the nodes."""

from __future__ import annotations

import threading
import time

import pytest
import torch.distributed as dist

from lab.node.inprocess.roll_call import BEAT_S, LOST, KeeperLost, RollCall


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store():
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def test_a_keeper_that_stops_beating_is_lost_after_silent_s_and_not_before(store):
    clock0, clock1 = Clock(), Clock()
    node0, node1 = RollCall(store, 0, 2, 3.0, clock0), RollCall(store, 1, 2, 3.0, clock1)
    for _ in range(4):  # both beat: neither is judged
        node1.tick()
        node0.tick()
        clock0.now += BEAT_S
        clock1.now += BEAT_S
    for _ in range(int(3.0 / BEAT_S) - 1):  # node 1 falls silent: up to 2.5 s on node 0's clock, not yet
        node0.tick()
        clock0.now += BEAT_S
    with pytest.raises(KeeperLost) as lost:  # 3.0 s
        node0.tick()
    assert lost.value.node == 1 and lost.value.silent_s >= 3.0


def test_a_lost_keeper_is_not_judged_again_until_a_new_one_beats_on_from_its_count(store):
    """lab.node.inprocess.fallback waits for a lost node: its silence is not news; a keeper started anew
    on that node goes on from the stored count, and from then on is judged like any other."""
    clock0 = Clock()
    node0, node1 = RollCall(store, 0, 2, 1.0, clock0), RollCall(store, 1, 2, 1.0, Clock())
    node1.tick()
    node0.tick()
    clock0.now += 1.0
    with pytest.raises(KeeperLost) as lost:
        node0.tick()
    node0.away(lost.value)
    for _ in range(10):  # still gone: no second KeeperLost while it is awaited
        clock0.now += BEAT_S
        node0.tick()
    back = RollCall(store, 1, 2, 1.0, Clock())
    back.count = int(store.get(RollCall.key(1, "beat")))  # as a keeper back on its node does
    back.tick()
    clock0.now += BEAT_S
    node0.tick()  # it moved: heard again
    clock0.now += 1.0
    with pytest.raises(KeeperLost):  # and judged again when it falls silent
        node0.tick()


def test_a_keeper_that_never_beat_or_said_it_was_done_is_not_judged(store):
    clock = Clock()
    node0 = RollCall(store, 0, 3, 1.0, clock)
    RollCall(store, 2, 3, 1.0, Clock()).tick()
    store.set(RollCall.key(2, "done"), "1")  # node 2 beat once, then finished
    for _ in range(10):  # node 1 never started to beat
        node0.tick()
        clock.now += BEAT_S
    assert store.get(RollCall.key(0, "beat")) == b"10"  # node 0 beat all along, judging as it went
    assert node0.silent(clock.now + 60) is None  # neither is judged, however long it is silent
    assert node0.heard == {}


def test_node_0_waits_for_every_other_keepers_word_before_it_takes_the_store_down(store):
    node0, node1 = RollCall(store, 0, 2, 5.0), RollCall(store, 1, 2, 5.0)
    node1.tick()
    finished = threading.Thread(target=node0.finish)
    finished.start()
    time.sleep(0.3)
    assert finished.is_alive()  # node 1 is still finishing its last ranks
    node1.finish()
    finished.join(5)
    assert not finished.is_alive()


def test_a_keeper_back_on_its_node_beats_as_it_asks_so_its_predecessors_silence_is_not_held_against_it(store):
    """Node 1's keeper SIGKILLed with its node, a new one started on it: the new keeper asks for a
    round and beats at once (lab.node.inprocess.fallback.rejoin). Node 0, which heard the round, then
    judges node 1 by the new beat, not by how long the old keeper has been silent; without that
    beat it stopped its ranks to wait for a round already asked (found by `lab chaos` under load)."""
    clock0 = Clock()
    node0 = RollCall(store, 0, 2, 1.0, clock0)
    RollCall(store, 1, 2, 1.0, Clock()).tick()  # the old keeper's last beat
    node0.tick()
    clock0.now += 0.9  # the old keeper is gone; the new one starts and imports torch meanwhile
    back = RollCall(store, 1, 2, 1.0, Clock())
    back.count = int(store.get(RollCall.key(1, "beat")))
    back.beat()  # with its ask for a round
    for _ in range(2):  # 1.4 s and 1.9 s after the old keeper's last beat (silent_s is 1.0): not lost
        clock0.now += BEAT_S
        node0.tick()
    assert store.get(RollCall.key(1, "beat")) == b"2"
    clock0.now += 1.0  # and the new keeper, silent in its turn, is judged by its own last beat
    with pytest.raises(KeeperLost):
        node0.tick()


def beat_all(keepers: list[RollCall], clocks: list[Clock], times: int) -> None:
    for _ in range(times):
        for keeper, clock in zip(keepers, clocks, strict=True):
            keeper.tick()
            clock.now += BEAT_S


def test_a_loss_one_watcher_sees_is_heard_once_by_every_keeper_watching_or_not(store):
    """Four nodes: node 3 is watched by nodes 1 and 2, not by node 0, which hears of it from the
    log one beat later; node 2's second word on the same loss is not news to anyone."""
    clocks = [Clock() for _ in range(4)]
    keepers = [RollCall(store, node, 4, 1.0, clocks[node]) for node in range(4)]
    assert keepers[0].watched == [1, 2] and keepers[3].watched == [0, 1]
    beat_all(keepers, clocks, 2)
    survivors, heard = keepers[:3], {}
    for _ in range(6):  # node 3 falls silent
        for keeper, clock in zip(survivors, clocks[:3], strict=True):
            try:
                keeper.tick()
            except KeeperLost as lost:
                assert keeper.node not in heard, "heard twice"
                heard[keeper.node] = lost
                keeper.away(lost)
            clock.now += BEAT_S
    assert sorted(heard) == [0, 1, 2] and {lost.node for lost in heard.values()} == {3}
    assert heard[0].beat == store.get(RollCall.key(3, "beat"))
    assert int(store.add(LOST, 0)) == 2  # both watchers wrote it; each keeper acted once


def test_a_keeper_started_anew_does_not_take_its_own_old_loss_for_news(store):
    clock0 = Clock()
    node0, node1 = RollCall(store, 0, 2, 1.0, clock0), RollCall(store, 1, 2, 1.0, Clock())
    node1.tick()
    node0.tick()
    clock0.now += 1.0
    with pytest.raises(KeeperLost):
        node0.tick()
    back = RollCall(store, 1, 2, 1.0, Clock())
    back.tick()  # the log holds node 1's loss, written before it started: no KeeperLost
    assert back.read == 1


class Counting:
    """A store client that counts the calls made through it."""

    def __init__(self, store):
        self.store, self.calls = store, 0

    def __getattr__(self, name):
        call = getattr(self.store, name)

        def counted(*args):
            self.calls += 1
            return call(*args)

        return counted


@pytest.mark.parametrize("nodes", [4, 64])
def test_a_keepers_store_calls_per_beat_do_not_grow_with_the_nodes(store, nodes):
    """Every keeper reading every beat is M^2 round trips a beat (lab bench scale: the store
    saturated at 64 keepers); a keeper's own share stays the same at 4 nodes and at 64."""
    clocks = [Clock() for _ in range(nodes)]
    counted = Counting(store)
    keepers = [RollCall(counted if node == 0 else store, node, nodes, 5.0, clocks[node]) for node in range(nodes)]
    beat_all(keepers, clocks, 2)
    before = counted.calls
    beat_all(keepers, clocks, 10)
    assert (counted.calls - before) / 10 <= 2 + 3 * 2  # its beat, the log's count, three calls a watched keeper


def test_node_0_does_not_wait_out_the_silence_of_a_keeper_that_left_when_stopped(store):
    """A preempted node's keeper is stopped by SIGTERM: it says it left, and node 0's keeper at the
    job's end takes that for its word (waiting out its silence cost each such preemption 5 s)."""
    node0, node1 = RollCall(store, 0, 2, 60.0), RollCall(store, 1, 2, 60.0)
    node1.tick()
    node1.leave()
    finished = threading.Thread(target=node0.finish)
    finished.start()
    finished.join(5)
    assert not finished.is_alive()


def test_a_keeper_back_on_its_node_voids_its_predecessors_word_so_node_0_waits_for_its_own(store):
    node0, node1 = RollCall(store, 0, 2, 60.0), RollCall(store, 1, 2, 60.0)
    node1.tick()
    node1.leave()
    back = RollCall(store, 1, 2, 60.0)
    back.back()
    finished = threading.Thread(target=node0.finish)
    finished.start()
    time.sleep(0.3)
    assert finished.is_alive()  # the keeper back on node 1 runs its ranks still
    back.finish()
    back.finish()  # said twice, counted once
    finished.join(5)
    assert not finished.is_alive()
    assert int(store.add("keeper/out", 0)) == 2
