"""A rank that ends itself stranded (lab.inprocess.lookout) is replaced like a dead one, and its
keeper records why. The keeper is real, with a real TCPStore; its rank and spares are small
stand-in processes: rank 0 exits with STRANDED_EXIT at once, the spare that takes its place
finishes."""

import json
import subprocess
import sys
import textwrap

from conftest import REPO

KEEPER = textwrap.dedent(
    """
    import argparse, subprocess, sys
    import torch.distributed as dist
    from lab.node.inprocess import keeper as k
    from lab.inprocess.heartbeat import STRANDED_EXIT

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    args = argparse.Namespace(store="-", node_rank=0, nodes=1, nproc_per_node=1, events_dir=sys.argv[1], script=["-"])
    args.max_replacements = 1
    keeper = k.Keeper(args, store)
    argvs = iter([["sh", "-c", f"exit {STRANDED_EXIT}"], ["sleep", "2"], ["sleep", "600"]])
    keeper._start = lambda extra, env: subprocess.Popen(next(argvs), preexec_fn=k.die_with_parent)
    sys.exit(k.run_until_stopped(keeper))
    """
)


def test_a_rank_that_left_stranded_is_replaced_by_the_spare_and_recorded(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", KEEPER, str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 0 exited (75); its spare takes over in generation 1" in done.stdout, done.stdout
    records = [json.loads(line) for f in tmp_path.glob("agent-*.jsonl") for line in f.read_text().splitlines()]
    stranded = [r["torchelastic"] for r in records if r["torchelastic"]["name"] == "lab.rank_stranded"]
    assert [r["metadata"] for r in stranded] == [{"rank": 0}], records
