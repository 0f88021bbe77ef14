"""The keepers agree on a restart of the whole group through a real TCPStore (lab.node.inprocess.rounds):
one round per hang however many keepers ask, heard by every keeper, in a generation of its own."""

import torch.distributed as dist

from lab.node.inprocess.rounds import IDLE_POLL_S, POLL_S, Rounds


def keepers(count: int) -> tuple[dist.TCPStore, list[Rounds]]:
    host = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    clients = [dist.TCPStore("127.0.0.1", host.port, is_master=False) for _ in range(count)]
    return host, [Rounds(client) for client in clients]


def test_every_keeper_asking_on_one_hang_opens_one_round_that_each_hears_once():
    store, (a, b, c) = keepers(3)
    store.add("generation", 2)  # two replacements happened before the hang
    a.ask("rank 0's collective timed out")
    b.ask("rank 3's collective timed out")  # the same hang, seen on another node
    heard = [k.heard(now=0.0) for k in (a, b, c)]
    assert {(r.number, r.generation, r.why) for r in heard if r} == {(1, 3, "rank 0's collective timed out")}
    assert all(heard)
    assert int(store.add("generation", 0)) == 3  # the round's own generation, newer than any before it
    assert [k.heard(now=1.0) for k in (a, b, c)] == [None, None, None]  # carried out once


def test_a_second_hang_after_the_first_round_opens_the_next_one():
    _, (a, b) = keepers(2)
    a.ask("first")
    assert a.heard(now=0.0).number == 1 and b.heard(now=0.0).number == 1
    b.ask("second")
    assert b.heard(now=1.0).why == "second" and a.heard(now=1.0).number == 2


def test_a_keeper_behind_by_two_rounds_carries_them_out_in_order():
    _, (a, late) = keepers(2)
    a.ask("first")
    a.heard(now=0.0)
    a.ask("second")
    first = late.heard(now=0.0)
    assert late.heard(now=IDLE_POLL_S / 2) is None  # nothing amiss on its own node: not asked again yet
    second = late.heard(now=IDLE_POLL_S)
    assert (first.number, first.why, second.number, second.why) == (1, "first", 2, "second")
    assert second.generation == first.generation + 1


class Counting:
    """A store client that counts the calls a keeper makes."""

    def __init__(self, store):
        self.store, self.calls = store, 0

    def add(self, key, value):
        self.calls += 1
        return self.store.add(key, value)

    def get(self, key):
        self.calls += 1
        return self.store.get(key)

    def set(self, key, value):
        self.calls += 1
        return self.store.set(key, value)


def test_a_keeper_with_nothing_amiss_polls_once_a_second_and_one_that_waits_ten_times():
    """Polling for rounds ten times a second was most of a keeper's store calls (lab bench scale)."""
    quiet, _ = keepers(0)  # a job with nothing amiss, and another whose keeper asked for a round
    idle, waiting = (Counting(dist.TCPStore("127.0.0.1", quiet.port, is_master=False)) for _ in range(2))
    amiss, _ = keepers(0)
    asking = Counting(dist.TCPStore("127.0.0.1", amiss.port, is_master=False))
    rounds = {name: Rounds(c) for name, c in (("idle", idle), ("asking", asking), ("waiting", waiting))}
    rounds["asking"].ask("rank 2's collective timed out")
    asked_calls = asking.calls
    for tick in range(64):  # 2 s of a keeper's loop, 1/32 s a turn (exact in binary)
        now = tick / 32
        rounds["idle"].heard(now=now)
        rounds["asking"].heard(now=now) if tick else None  # its round is heard at once; none after
        rounds["waiting"].heard(now=now, waiting=True)
    assert idle.calls == 2  # at 0 s and 1 s
    assert waiting.calls == 16  # every 4 turns: 0.125 s, the first turn at least 0.1 s after the last poll
    # it polled every 0.1 s until it heard its round (rounds, generation, why), then once a second
    assert rounds["asking"].carried_out == 1 and asking.calls - asked_calls == 3 + 1


def test_a_round_asked_elsewhere_is_heard_within_poll_s_by_a_keeper_that_waits_and_idle_poll_s_by_one_that_does_not():
    _, (asker, waiting, idle) = keepers(3)
    waiting.heard(now=0.0, waiting=True)
    idle.heard(now=0.0)
    asker.ask("node 1's keeper came back after the node was lost")
    assert waiting.heard(now=POLL_S, waiting=True).number == 1
    assert idle.heard(now=POLL_S) is None and idle.heard(now=IDLE_POLL_S).number == 1
