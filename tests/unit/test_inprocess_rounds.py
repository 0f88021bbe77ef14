"""The keepers agree on a restart of the whole group through a real TCPStore (lab.node.inprocess.rounds):
one round per hang however many keepers ask, heard by every keeper, in a generation of its own."""

import torch.distributed as dist

from lab.node.inprocess.rounds import POLL_S, Rounds


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


def test_a_keeper_behind_by_two_rounds_carries_them_out_in_order_and_polls_no_faster_than_poll_s():
    _, (a, late) = keepers(2)
    a.ask("first")
    a.heard(now=0.0)
    a.ask("second")
    first = late.heard(now=0.0)
    assert late.heard(now=POLL_S / 2) is None  # not yet asked again
    second = late.heard(now=POLL_S)
    assert (first.number, first.why, second.number, second.why) == (1, "first", 2, "second")
    assert second.generation == first.generation + 1
