"""An in-process attempt ends the moment its keeper opens the next generation.

Two real ranks (processes, gloo on loopback) train in lab.inprocess attempts against a real
TCPStore that this test hosts, as node 0's keeper would. No rank dies: the test opens
generation 1 itself, as a keeper does after a death. Each rank sits in generation 0
all-reducing for as long as its attempt lasts, so without the attempt's watch of the store
neither would ever leave it (the test would time out); with it, both leave generation 0 on a
lost peer, join generation 1 together, and finish.
"""

import os
import subprocess
import sys
import textwrap

import torch.distributed as dist
from conftest import REPO

from lab.inprocess.api import PEER_LOST
from lab.nodeenv import NodeEnv

RANK = textwrap.dedent(
    """
    import time, torch, torch.distributed as dist
    from lab.inprocess import attempts

    for attempt in attempts():
        with attempt:
            if attempt.generation == 0:
                print("joined", flush=True)
                while True:  # until the attempt ends: only the watch can end it, no peer dies
                    dist.all_reduce(torch.ones(1))
                    time.sleep(0.02)
            total = torch.ones(1)
            dist.all_reduce(total)
        if attempt.peer_lost:
            print(f"generation {attempt.generation} ended: {attempt.peer_lost}", flush=True)
    print(f"finished in generation {attempt.generation} with {int(total)}", flush=True)
    """
)


def test_ranks_leave_their_generation_when_the_next_one_opens_and_join_it_together():
    store = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, wait_for_workers=False)
    wire = NodeEnv(inprocess_store=f"127.0.0.1:{store.port}", pg_timeout_s=60).render()
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK],
            cwd=REPO,
            env={**_base_env(), **wire, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        for rank in ranks:
            assert rank.stdout.readline().strip() == "joined"
        store.add("generation", 1)  # what the keeper does after a death
        store.set("gen1/open", b"1")
        outputs = [rank.communicate(timeout=60)[0] for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    for rank, out in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, out
        ended = [line for line in out.splitlines() if line.startswith("generation 0 ended: ")]
        assert ended and any(cause in ended[0] for cause in PEER_LOST), out
        assert "finished in generation 1 with 2" in out, out  # both ranks in one group again


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LAB_") and k not in ("RANK", "WORLD_SIZE")}
