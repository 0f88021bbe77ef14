"""lab.node.exit_barrier.arrive on a real TCPStore: a signalled agent counts itself in at torchrun's
exit barrier once, without waiting, so a peer's barrier (torch's own code) completes; nothing
happens without a group, and a store gone with its host is one line, not an error. The signal
path on real agents is tests/test_exit_barrier.py."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import torch.distributed as dist
from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
from torch.distributed.elastic.utils import store as store_util

from lab.node import exit_barrier


def a_store() -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=5))


def an_agent(store, world: int = 2) -> SimpleNamespace:
    return SimpleNamespace(_store=store, _worker_group=SimpleNamespace(group_world_size=world), _in_exit_barrier=False)


def test_a_signalled_agent_counts_in_once_and_its_peers_barrier_completes():
    store = a_store()
    signalled = an_agent(store)
    assert exit_barrier.arrive(signalled) is True and getattr(signalled, exit_barrier.COUNTED_IN) is True
    assert exit_barrier.arrive(signalled) is False  # counted already: never twice
    store_util.barrier(store, world_size=2, key_prefix=_TERMINAL_STATE_SYNC_ID, barrier_timeout=5)  # the peer's
    assert store.add(_TERMINAL_STATE_SYNC_ID + store_util._NUM_MEMBERS, 0) == 2


def test_an_agent_already_in_the_barrier_or_out_of_it_by_the_signal_is_not_counted_again():
    store = a_store()
    waiting = an_agent(store)
    waiting._in_exit_barrier = True  # torch set it before its own count
    assert exit_barrier.arrive(waiting) is False
    woken = an_agent(store)  # the signal ended its wait: torch cleared its flag, the count stays
    setattr(woken, exit_barrier.COUNTED_IN, True)
    assert exit_barrier.arrive(woken) is False
    assert store.add(_TERMINAL_STATE_SYNC_ID + store_util._NUM_MEMBERS, 0) == 0


def test_no_group_yet_or_a_store_gone_is_no_arrival(capsys):
    assert exit_barrier.arrive(an_agent(None)) is False
    assert exit_barrier.arrive(SimpleNamespace(_store=a_store(), _worker_group=None)) is False

    class Gone:
        def set_timeout(self, _timeout):
            pass

        def add(self, _key, _amount):
            raise RuntimeError("Connection reset by peer")

    assert exit_barrier.arrive(an_agent(Gone())) is False
    assert "could not arrive at the exit barrier: Connection reset by peer" in capsys.readouterr().err
