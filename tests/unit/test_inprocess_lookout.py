"""An in-process attempt gets out of its generation the moment its keeper opens the next one.

Real ranks (processes, gloo on loopback) train in lab.inprocess attempts against a real TCPStore
that this test hosts and whose generations it opens, as node 0's keeper would after a death.
Each case waits far less than the process-group timeout (60 s): a rank that only the timeout
could free fails the test.
"""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch.distributed as dist
from conftest import REPO

from lab.inprocess import lookout
from lab.inprocess.group import PEER_LOST
from lab.inprocess.heartbeat import ABSENT_EXIT, NO_STATE_EXIT, STRANDED_EXIT
from lab.nodeenv import NodeEnv

# Each rank sits in generation 0 in a receive that no peer will ever match (or, as STRAND, in
# a wait inside torch.distributed that no connection of its group ends): only its lookout can
# end that attempt.
RANK = textwrap.dedent(
    """
    import os, time, torch, torch.distributed as dist
    from torch.distributed.elastic.utils.store import barrier
    from lab.inprocess import attempts

    for attempt in attempts():
        with attempt:
            if attempt.generation == 0:
                print("joined", flush=True)
                if os.environ.get("STRAND") == os.environ["RANK"]:
                    own = dist.TCPStore(attempt.store.host, attempt.store.port, is_master=False)
                    barrier(own, world_size=3, key_prefix="never/", barrier_timeout=600)  # 2 ranks: never
                dist.recv(torch.ones(1), src=1 - dist.get_rank())
            total = torch.ones(1)
            dist.all_reduce(total)
        if attempt.peer_lost:
            print(f"generation {attempt.generation} ended: {attempt.peer_lost}", flush=True)
            if os.environ.get("BREAK") == os.environ["RANK"]:
                break  # a script that does not train on in the next attempt
    print(f"finished in generation {attempt.generation} with {int(total)}", flush=True)
    """
)
# A rank whose join sits in a wait of torch.distributed that no connection the lookout shuts down
# can end: a double of gloo's connect to a peer gone from the generation, retried on every
# refusal (that race cannot be produced on demand). The wait is a store barrier on a client
# opened before the join began, which the lookout leaves alone.
STUCK_IN_JOIN = textwrap.dedent(
    """
    import os, torch.distributed as dist
    from torch.distributed.elastic.utils.store import barrier
    from lab.inprocess import api, attempts

    host, port = os.environ["LAB_INPROCESS_STORE"].rsplit(":", 1)
    held = dist.TCPStore(host, int(port), is_master=False)
    original = api.Attempt._join

    def join(self, backend, before):
        if self.generation == 0:
            print("joining", flush=True)
            barrier(held, world_size=3, key_prefix="never/", barrier_timeout=600)
        return original(self, backend, before)

    api.Attempt._join = join
    for attempt in attempts():
        with attempt:
            print(f"joined generation {attempt.generation}", flush=True)
    """
)
# A rank that adopts the newest state: STEP, its model's weight 1.5 (none: a replacement, holding nothing).
ADOPT = textwrap.dedent(
    """
    import os, torch
    from lab.inprocess import attempts

    model = torch.nn.Linear(1, 1, bias=False)
    step = int(os.environ["STEP"]) if "STEP" in os.environ else None
    with torch.no_grad():
        model.weight.fill_(1.5 if step is not None else 0.0)
    for attempt in attempts():
        with attempt:
            step = attempt.adopt(model, None, step)
            print(f"trained from {step} with {float(model.weight)}", flush=True)
    """
)
WAIT_S = 30  # half the process-group timeout


@pytest.fixture
def store():
    return dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, wait_for_workers=False)


def start(
    store, rank: int, generation: int | None = None, script: str = RANK, join_timeout_s: float | None = None, **env
) -> subprocess.Popen:
    wire = NodeEnv(
        inprocess_store=f"127.0.0.1:{store.port}",
        pg_timeout_s=60,
        inprocess_generation=generation,
        inprocess_join_timeout_s=join_timeout_s,
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("LAB_") and k not in ("RANK", "WORLD_SIZE")}
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**base, **wire.render(), **env, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def open_next(store) -> int:
    """What a keeper does after a death."""
    generation = store.add("generation", 1)
    store.set(f"gen{generation}/open", b"1")
    return generation


def finish(*ranks: subprocess.Popen) -> list[str]:
    try:
        return [rank.communicate(timeout=WAIT_S)[0] for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()


def test_ranks_in_a_collective_leave_their_generation_when_the_next_one_opens_and_join_it_together(store):
    ranks = [start(store, rank) for rank in range(2)]
    for rank in ranks:
        assert rank.stdout.readline().strip() == "joined"
    open_next(store)
    for rank, out in zip(ranks, finish(*ranks), strict=True):
        assert rank.returncode == 0, out
        ended = [line for line in out.splitlines() if line.startswith("generation 0 ended: ")]
        assert ended and any(cause in ended[0] for cause in PEER_LOST), out
        assert "finished in generation 1 with 2" in out, out  # both ranks in one group again


def test_a_join_waiting_for_a_rank_that_will_never_come_joins_the_next_generation_instead(store):
    """Rank 1 died before it joined generation 0: rank 0 waits in the join for it. The keeper
    opens generation 1 and a replacement joins that one; rank 0 leaves its join and meets it."""
    survivor = start(store, 0)
    deadline = time.monotonic() + WAIT_S
    while not store.check(["generation"]) and time.monotonic() < deadline:
        time.sleep(0.01)  # it reads the newest generation first: 0 here, so it joins that one
    time.sleep(0.5)
    open_next(store)
    replacement = start(store, 1, generation=1)
    outs = finish(survivor, replacement)
    assert [r.returncode for r in (survivor, replacement)] == [0, 0], outs
    assert all("finished in generation 1 with 2" in out for out in outs), outs
    assert "generation 1 opened while it joined generation 0" in outs[0], outs[0]


def test_a_rank_stranded_in_its_collective_leaves_and_its_replacement_joins_the_newest_generation(store):
    """gloo strands a send now and then (lab.inprocess.lookout): a race that cannot be produced
    on demand. A rank waiting inside torch.distributed on something no connection of its group
    ends (a store barrier that never fills) looks the same to its lookout. Rank 1 is that rank:
    it exits with STRANDED_EXIT and one line; the test, as its keeper, opens generation 2 with a
    replacement, and rank 0, waiting in generation 1's join for rank 1, joins generation 2
    instead."""
    ranks = [start(store, rank, STRAND="1") for rank in range(2)]
    for rank in ranks:
        assert rank.stdout.readline().strip() == "joined"
    open_next(store)
    stranded_out = finish(ranks[1])[0]
    assert ranks[1].returncode == STRANDED_EXIT, stranded_out
    assert "gloo stranded" in stranded_out and "rank 1 ran no Python" in stranded_out, stranded_out
    open_next(store)
    replacement = start(store, 1, generation=2)
    outs = finish(ranks[0], replacement)
    assert [r.returncode for r in (ranks[0], replacement)] == [0, 0], outs
    assert "generation 0 ended: " in outs[0], outs[0]
    assert all("finished in generation 2 with 2" in out for out in outs), outs


def test_a_join_stuck_where_no_shutdown_reaches_ends_the_rank_soon_after_the_next_generation_opens(store):
    """A second death during a regroup: gloo's connect in the join retries a refused peer until
    its own timeout (100 s measured in `lab chaos`), deaf to the lookout's shutdown. The rank
    leaves with STRANDED_EXIT and one line, so its keeper gives its place to a spare, well
    before the process-group timeout (60 s here)."""
    rank = start(store, 0, script=STUCK_IN_JOIN)
    assert rank.stdout.readline().strip() == "joining"
    open_next(store)
    out = finish(rank)[0]  # within WAIT_S, half the process-group timeout
    assert rank.returncode == STRANDED_EXIT, out
    assert "rank 0 ran no Python for" in out and "still inside its join of generation 0" in out, out
    assert "joined generation" not in out, out


def test_a_regroup_where_every_rank_is_a_replacement_asks_for_the_checkpoint_instead_of_step_0(store):
    """Deaths during a regroup can leave no survivor: every rank of the new generation replaced
    one and holds nothing (found by `lab chaos`: such a group trained on from step 0, its progress
    thrown away). Each leaves with NO_STATE_EXIT and one line, so its keepers restart the group
    from the checkpoint; none trains."""
    ranks = [start(store, rank, generation=0, script=ADOPT) for rank in range(2)]
    for rank, out in zip(ranks, finish(*ranks), strict=True):
        assert rank.returncode == NO_STATE_EXIT, out
        assert "no rank of generation 0 holds the job's state" in out, out
        assert "trained from" not in out, out


def test_a_replacement_among_survivors_takes_the_newest_state_from_a_peer(store):
    """The other side of the same rule: one rank holds step 7, the replacement nothing; both go
    on from step 7, with the survivor's weights."""
    ranks = [start(store, 0, script=ADOPT, STEP="7"), start(store, 1, generation=0, script=ADOPT)]
    outs = finish(*ranks)
    assert [r.returncode for r in ranks] == [0, 0], outs
    assert all("trained from 7 with 1.5" in out for out in outs), outs


def test_a_join_whose_peers_never_come_ends_at_the_join_timeout_saying_they_are_gone(store):
    """Node 0 started again alone, with a new store: its ranks wait for peers whose nodes are
    gone. At the join timeout (4 s here) the rank leaves with ABSENT_EXIT, which its keeper
    takes for the end of the job (no round could bring them), not with a timeout that asks for
    round after round until the budget is spent (found by `lab chaos`: over 8 minutes)."""
    rank = start(store, 0, join_timeout_s=4)
    out = finish(rank)[0]
    assert rank.returncode == ABSENT_EXIT, out
    assert "rank 0: only 1 of 2 ranks came to generation 0 within the join timeout (4 s)" in out, out


def test_a_rank_that_leaves_its_loop_after_a_lost_peer_exits_1_saying_why(store):
    """Its peers would wait for it in the next generation until their timeout; exiting non-zero
    lets its keeper give its place to a spare instead (tests/unit/test_keeper_stranded.py shows a
    keeper replacing a rank that exited)."""
    ranks = [start(store, rank, BREAK="1") for rank in range(2)]
    for rank in ranks:
        assert rank.stdout.readline().strip() == "joined"
    open_next(store)
    out = finish(ranks[1])[0]
    ranks[0].kill()  # it waits in generation 1 for rank 1: its keeper would start a spare
    ranks[0].wait()
    assert ranks[1].returncode == 1, out
    assert "rank 1 left its `for attempt in attempts()` loop after generation 0 ended on a lost peer" in out, out
    assert "finished" not in out, out


def test_only_a_thread_waiting_inside_a_collective_is_judged_stranded(store):
    """lookout.stranded on threads of this process: one in a wait inside torch.distributed (a
    store barrier that never fills) is stranded; one in a long call outside any collective (as a
    large torch.save) is not, however long it runs no Python."""
    from torch.distributed.elastic.utils.store import barrier

    waiting = threading.Thread(target=barrier, args=(store, 2, "never/", 30), daemon=True)
    asleep = threading.Thread(target=time.sleep, args=(4,), daemon=True)
    for thread in (waiting, asleep):
        thread.start()
    began = time.monotonic()
    assert lookout.stranded(waiting.ident, lambda: time.monotonic() - began < 10, {})
    began = time.monotonic()
    assert not lookout.stranded(asleep.ident, lambda: time.monotonic() - began < 3, {})
    # Fill the barrier at last, from a client of its own: the thread ends in this test, not as an
    # unhandled timeout 30 s later in whichever test then runs on this worker.
    barrier(dist.TCPStore("127.0.0.1", store.port, is_master=False), 2, "never/", 30)
    waiting.join(10)
    assert not waiting.is_alive()
