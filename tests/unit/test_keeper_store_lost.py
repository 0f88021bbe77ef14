"""An in-process keeper whose job's store is gone says so in one line and stops its ranks.

Node 0's keeper hosts the job's store; a keeper on another node needs it to replace a rank.
Here the store is a real TCPStore in a process of its own, SIGKILLed as node 0's keeper would
be; the keeper is real, in a process of its own, on node 1; its ranks are small stand-in
processes (`sleep`, and one that exits 1 when the test says, as a dying rank would).
"""

import os
import subprocess
import sys
import textwrap
import time

from conftest import REPO

STORE = textwrap.dedent(
    """
    import sys, time, torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    print(store.port, flush=True)
    time.sleep(600)
    """
)

KEEPER = textwrap.dedent(
    """
    import argparse, subprocess, sys
    from datetime import timedelta
    import torch.distributed as dist
    from lab.node.inprocess import keeper as k

    port, flag = int(sys.argv[1]), sys.argv[2]
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
    args = argparse.Namespace(
        store=f"127.0.0.1:{port}", node_rank=1, nodes=2, nproc_per_node=2, events_dir=None, script=["-"]
    )
    args.max_replacements = 3
    keeper = k.Keeper(args, store)
    dying = ["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done; exit 1"]
    argvs = iter([["sleep", "600"], dying, ["sleep", "600"], ["sleep", "600"]])
    keeper._start = lambda extra, env: subprocess.Popen(next(argvs), preexec_fn=k.die_with_parent)
    keeper.start()
    keeper.start = lambda: None  # run() starts the ranks; they are started, their pids printed first
    print(" ".join(str(p.pid) for p in [*keeper.ranks.values(), keeper.spare[1]]), flush=True)
    sys.exit(k.run_until_stopped(keeper))
    """
)


def test_a_keeper_that_loses_the_store_says_so_in_one_line_and_stops_its_ranks(tmp_path):
    store = subprocess.Popen([sys.executable, "-c", STORE], stdout=subprocess.PIPE, text=True)
    keeper = None
    try:
        port = store.stdout.readline().strip()
        flag = tmp_path / "die"
        keeper = subprocess.Popen(
            [sys.executable, "-c", KEEPER, port, str(flag)], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        children = [int(pid) for pid in keeper.stdout.readline().split()]
        store.kill()  # node 0's keeper, and the store with it
        store.wait(10)
        time.sleep(0.5)
        flag.touch()  # a rank of node 1 dies: replacing it needs the store
        said = keeper.communicate(timeout=60)[0]
    finally:
        store.kill()
        if keeper is not None:
            keeper.kill()
    assert keeper.returncode == 1, said
    lines = [line for line in said.splitlines() if line.startswith("[keeper node1]")]
    assert len(lines) == 1 and "Traceback" not in said, said
    assert f"the job's store at 127.0.0.1:{port} cannot be reached (node 0's keeper hosts it)" in lines[0]
    assert lines[0].endswith("this node's ranks stop")
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]
