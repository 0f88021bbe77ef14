"""The keepers agree on a restart of the whole group through a real TCPStore (lab.node.inprocess.rounds):
one round per hang however many keepers ask, heard by every keeper, in a generation of its own;
each keeper waits for the next round in a thread, and asks the store nothing while none comes."""

import time

import pytest
import torch.distributed as dist

from lab.node.inprocess.rounds import Rounds, connecting

OPEN: list[Rounds] = []


@pytest.fixture(autouse=True)
def closed():
    """Every keeper's wait ended, as the keeper ends it before it exits."""
    yield
    for keeper in OPEN:
        keeper.close()
    OPEN.clear()


def keepers(count: int) -> tuple[dist.TCPStore, list[Rounds]]:
    host = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    address = f"127.0.0.1:{host.port}"
    made = [Rounds(dist.TCPStore("127.0.0.1", host.port, is_master=False), connecting(address)) for _ in range(count)]
    OPEN.extend(made)
    return host, made


def hears(keeper: Rounds, within_s: float = 10.0):
    """The round a keeper hears, polling as its loop does; None if none within within_s."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        heard = keeper.heard()
        if heard:
            return heard
        time.sleep(0.005)
    return None


def test_every_keeper_asking_on_one_hang_opens_one_round_that_each_hears_once():
    store, (a, b, c) = keepers(3)
    for keeper in (a, b, c):
        assert keeper.heard() is None  # none asked yet: each now waits for round 1
    store.add("generation", 2)  # two replacements happened before the hang
    a.ask("rank 0's collective timed out")
    b.ask("rank 3's collective timed out")  # the same hang, seen on another node
    heard = [hears(k) for k in (a, b, c)]
    assert {(r.number, r.generation, r.why) for r in heard if r} == {(1, 3, "rank 0's collective timed out")}
    assert all(heard)
    assert int(store.add("generation", 0)) == 3  # the round's own generation, newer than any before it
    assert [hears(k, within_s=0.3) for k in (a, b, c)] == [None, None, None]  # carried out once


def test_a_second_hang_after_the_first_round_opens_the_next_one():
    _, (a, b) = keepers(2)
    a.ask("first")
    assert hears(a).number == 1 and hears(b).number == 1
    b.ask("second")
    assert hears(b).why == "second" and hears(a).number == 2


def test_a_keeper_behind_by_two_rounds_carries_them_out_in_order():
    _, (a, late) = keepers(2)
    a.ask("first")
    hears(a)
    a.ask("second")
    first, second = hears(late), hears(late)
    assert (first.number, first.why, second.number, second.why) == (1, "first", 2, "second")
    assert second.generation == first.generation + 1


class Counting:
    def __init__(self, store):
        self.store, self.calls = store, 0

    def __getattr__(self, name):
        self.calls += 1
        return getattr(self.store, name)


def test_a_keeper_waiting_for_a_round_asks_the_store_nothing_until_one_opens():
    """Polling for rounds ten times a second was most of a keeper's store calls (lab bench scale)."""
    host = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    counted = Counting(dist.TCPStore("127.0.0.1", host.port, is_master=False))
    keeper = Rounds(counted, connecting(f"127.0.0.1:{host.port}"))
    OPEN.append(keeper)
    assert hears(keeper, within_s=0.5) is None
    assert counted.calls == 0
    Rounds(host, connecting("unused:0")).ask("a hang")
    assert hears(keeper).why == "a hang" and counted.calls == 2  # the round's generation and why, once


def test_close_ends_a_wait_for_a_round_that_never_came():
    """A keeper ends its wait before it exits: a thread still in it when the interpreter finalizes,
    and the store gone, aborted the keeper (status -6)."""
    _, (keeper,) = keepers(1)
    assert keeper.heard() is None
    ((thread, _end),) = keeper._waiting
    assert thread.is_alive()
    keeper.close()
    assert not thread.is_alive() and keeper._waiting == []
