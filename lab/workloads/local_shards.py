"""RANK or LOCAL_RANK for something that belongs to one node: the classic multi-node bug.

    torchrun --nnodes=2 ... lab/workloads/local_shards.py --index rank        # fails on node 1
    torchrun --nnodes=2 ... lab/workloads/local_shards.py --index local_rank  # works

Each node prepares one shard file per local process in a node-local folder (as a node's
data cache or its GPUs: cuda:0..cuda:N-1 exist on every node). Indexing them by the
global RANK works on node 0 and fails on every other node, where RANK >= N.
"""

import argparse
import os
from pathlib import Path

import torch.distributed as dist

from lab.nodeenv import NodeEnv
from lab.workloads.distributed import process_group, say


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--index", choices=("rank", "local_rank"), required=True)
    p.add_argument(
        "--dir",
        default=NodeEnv.parse().ckpt_dir or "/tmp/lab-local-shards",
        help="where each node's folder goes (default: the lab's checkpoint dir)",
    )
    args = p.parse_args()
    with process_group() as ctx:
        node = int(os.environ.get("GROUP_RANK", "0"))  # torchrun's node rank
        local = Path(args.dir) / f"node-local-{node}"
        if ctx.local_rank == 0:
            local.mkdir(parents=True, exist_ok=True)
            for i in range(int(os.environ.get("LOCAL_WORLD_SIZE", "1"))):
                (local / f"shard-{i}").write_text(f"shard {i} of node {node}\n")
        dist.barrier()
        index = ctx.rank if args.index == "rank" else ctx.local_rank
        text = (local / f"shard-{index}").read_text().strip()  # FileNotFoundError when index >= N
        say(f"rank {ctx.rank} (local rank {ctx.local_rank}, node {node}) opened shard-{index}: {text}")


if __name__ == "__main__":
    main()
