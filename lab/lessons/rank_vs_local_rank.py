"""rank-vs-local-rank: using the global RANK where a per-node index belongs.

    lab exercise run rank-vs-local-rank

local_shards.py on 2 hosts x 2: each node prepares shard-0 and shard-1 in its own
folder (like a node's data cache, or its GPUs cuda:0 and cuda:1), then each rank opens
the shard its index names. Indexed by RANK, node 0 works and node 1 asks for shard-2
and shard-3, which no node has. Indexed by LOCAL_RANK, every rank finds its shard.
"""

from lab.topology import Topology

NAME = "rank-vs-local-rank"
SUMMARY = "RANK used for a per-node file or device: works on node 0, fails on node 1"
KIND = "lesson"
COMMAND = "lab exercise run rank-vs-local-rank"
DEPTHS = {
    "beginner": """
RANK numbers every copy in the whole job (0-3 on 2 machines x 2). LOCAL_RANK numbers the
copies on one machine (0-1 on each). Things that exist once per machine, its GPUs or
its local files, must be picked with LOCAL_RANK. The bug hides on one machine, where
the two are equal.""",
    "developer": """
`torch.cuda.set_device(int(os.environ["RANK"]))` works on one node and fails on the
second ("invalid device ordinal": node 1 has cuda:0 and cuda:1, not cuda:2). Use
LOCAL_RANK for devices and node-local paths, RANK for the global role (who logs, which
data shard of the whole dataset), GROUP_RANK for the node's index.""",
    "researcher": """
torchrun assigns RANK = group rank offset + LOCAL_RANK after each rendezvous round, and
with c10d or etcd rendezvous the node order (hence the offset) can change between
rounds, so any per-node state keyed by RANK can also break on restart. LOCAL_RANK and
LOCAL_WORLD_SIZE are stable properties of the host.""",
}


def run(lesson) -> None:
    report = lesson.report
    topology = Topology(nodes=2, nproc_per_node=2)
    buggy = lesson.job("indexed by RANK", topology, "local_shards", ["--index", "rank"])
    fixed = lesson.job("indexed by LOCAL_RANK", topology, "local_shards", ["--index", "local_rank"])
    opened = sorted(int(m[1]) for m in buggy.matches(r"rank (\d+) \(local rank \d+, node \d+\) opened"))
    missing = buggy.matches(r"FileNotFoundError.*(shard-[23])")
    report.facts.update(rank_index_opened=opened, rank_index_missing=sorted({m[1] for m in missing}))
    report.check("by RANK: node 0's ranks found their shards", opened == [0, 1], f"opened by ranks {opened}")
    report.check(
        "by RANK: node 1's ranks asked for shard-2/shard-3 and failed",
        not buggy.ok and bool(missing),
        ", ".join(sorted({m[1] for m in missing})) or "no FileNotFoundError",
    )
    fixed_opened = sorted(int(m[1]) for m in fixed.matches(r"rank (\d+) \(local rank \d+, node \d+\) opened"))
    report.check(
        "by LOCAL_RANK: every rank found its shard",
        fixed.ok and fixed_opened == [0, 1, 2, 3],
        f"opened by ranks {fixed_opened}",
    )
    report.explanation = "per-node things (GPUs, local files) are indexed by LOCAL_RANK; RANK is global"
