"""fsdp-shards: what FSDP2 shards, what it gathers, and why its checkpoint loads anywhere.

    lab exercise run fsdp-shards

Runs lab/workloads/shard_memory.py with 2 ranks on one host, then 4 on two hosts. Each rank
trains the same model under DDP, then under FSDP2, and prints the bytes it holds of
parameters, gradients and Adam's state, the bytes of a weight as its layer's forward saw
them, and what its checkpoint is. The verdict asserts, at each world size: DDP holds the
whole model on every rank; FSDP2 holds 1/world of it on each, gathers a layer whole for its
forward, and trains the same model to rounding; DDP's checkpoint is one file every rank reads
whole; DCP's is a shard file per rank and a `.metadata`, which one process alone (another
world size) loads into the whole model, the checksum unchanged.
"""

from __future__ import annotations

import re

from lab.topology import Topology

NAME = "fsdp-shards"
SUMMARY = "DDP's whole model against FSDP2's shards: bytes per rank, what a forward gathers, DCP's checkpoint"
KIND = "lesson"
COMMAND = "lab exercise run fsdp-shards"
WORLDS = ((2, Topology(nodes=1, nproc_per_node=2)), (4, Topology(nodes=2, nproc_per_node=2)))
ROUNDING = 1e-6  # DDP all-reduces, FSDP2 reduce-scatters: the same sums, maybe in another order
HOLDS = re.compile(
    r"rank (\d+) (ddp|fsdp2) holds params (\d+) grads (\d+) adam (\d+) of model (\d+) bytes; "
    r"a layer's forward saw (\d+) bytes"
)
DDP_FILE = re.compile(r"rank (\d+) ddp checkpoint one file of (\d+) bytes, read whole by this rank; "
                      r"checksum trained (\S+) loaded (\S+)")  # fmt: skip
DCP_FOLDER = re.compile(
    r"rank (\d+) fsdp2 checkpoint (\d+) shard files and \.metadata (True|False), this rank wrote (\d+) bytes; "
    r"checksum trained (\S+)(?: loaded by one process whole (\S+))?"
)
DEPTHS = {
    "beginner": """
DDP gives every rank a whole copy of the model. FSDP2 cuts each layer's weights into as
many pieces as there are ranks and gives each rank one piece, so a model too big for one
device fits across several. To compute a layer, the ranks briefly lend each other their
pieces, then drop the borrowed ones again.""",
    "developer": """
fully_shard(layer) on each block, then on the whole model, turns every parameter into a
DTensor sharded on dim 0: a rank holds 1/world of the parameters, and so of the gradients
and the optimizer's state (Adam keeps two moments per weight). Before a layer's forward and
backward it all-gathers that layer's parameters and frees them after; gradients are
reduce-scattered. A checkpoint is therefore every rank's shards: save and load them with
torch.distributed.checkpoint (get_state_dict / dcp.save / dcp.load), not torch.save on rank 0.""",
    "researcher": """
DDP's memory per rank is the whole model, its gradients and the optimizer state (4x the
weights with Adam); FSDP2's is that divided by the world size, plus one layer's gathered
weights at a time, which is why it wraps layer by layer. DCP writes one file per rank and a
.metadata mapping each tensor's pieces to files and offsets; loading plans reads from that
map for whatever sharding the loader has (another world size, or one unsharded process with
no_dist), which a DDP state_dict file, one pickled whole, cannot do except by every rank
reading all of it.""",
}


def parse(lines: list[str]) -> dict:
    """{rank: {"ddp"/"fsdp2": holdings, "ddp_file"/"dcp": the checkpoint's line}} from a run's output."""
    ranks: dict[int, dict] = {}
    for line in lines:
        if m := HOLDS.search(line):
            keys = ("params", "grads", "adam", "model", "seen")
            ranks.setdefault(int(m[1]), {})[m[2]] = dict(zip(keys, map(int, m.groups()[2:]), strict=True))
        elif m := DDP_FILE.search(line):
            ranks.setdefault(int(m[1]), {})["ddp_file"] = {"bytes": int(m[2]), "trained": m[3], "loaded": m[4]}
        elif m := DCP_FOLDER.search(line):
            found = {"shards": int(m[2]), "metadata": m[3] == "True", "wrote": int(m[4]), "trained": m[5]}
            ranks.setdefault(int(m[1]), {})["dcp"] = {**found, "loaded": m[6]}
    return ranks


def run(lesson) -> None:
    report = lesson.report
    for world, topology in WORLDS:
        output = lesson.job(f"{world} ranks", topology, "shard_memory")
        ranks = parse(output.lines)
        report.facts[f"bytes_per_rank_{world}"] = {r: {k: ranks[r].get(k) for k in ("ddp", "fsdp2")} for r in ranks}
        whole = output.ok and sorted(ranks) == list(range(world)) and all(len(said) == 4 for said in ranks.values())
        report.check(f"{world} ranks: every rank ran both and said what it holds", whole, f"ranks {sorted(ranks)}")
        if whole:
            check_world(report, world, ranks)
    report.explanation = (
        "FSDP2 divides the model, its gradients and the optimizer state by the world size and gathers one "
        "layer at a time; its DCP checkpoint is a map of shards any world size can read"
    )


def check_world(report, world: int, ranks: dict[int, dict]) -> None:
    ddp, fsdp = [ranks[r]["ddp"] for r in sorted(ranks)], [ranks[r]["fsdp2"] for r in sorted(ranks)]
    model = ddp[0]["model"]
    report.check(
        f"{world} ranks, DDP: every rank holds the whole model, its gradients and Adam's two moments",
        all((h["params"], h["grads"], h["adam"]) == (model, model, 2 * model) for h in ddp),
        f"{ddp[0]['params']} bytes of parameters on each rank, of {model}",
    )
    share = model / world
    report.check(
        f"{world} ranks, FSDP2: each rank holds 1/{world} of the parameters, gradients and Adam's state",
        sum(h["params"] for h in fsdp) == sum(h["grads"] for h in fsdp) == model
        and sum(h["adam"] for h in fsdp) == 2 * model
        and all(h["params"] <= share * 1.05 for h in fsdp),
        f"parameters per rank {', '.join(str(h['params']) for h in fsdp)} bytes, of {model}",
    )
    report.check(
        f"{world} ranks, FSDP2: a layer's forward saw its whole weight, gathered from the ranks' shards",
        all(h["seen"] == ddp[0]["seen"] for h in fsdp),
        f"{fsdp[0]['seen']} bytes in the forward; each rank keeps about {fsdp[0]['seen'] // world}",
    )
    trained_ddp = float.fromhex(ranks[0]["ddp_file"]["trained"])
    trained_fsdp = float.fromhex(ranks[0]["dcp"]["trained"])
    report.check(
        f"{world} ranks: DDP and FSDP2 trained the same model, to rounding",
        abs(trained_ddp - trained_fsdp) <= ROUNDING * abs(trained_ddp),
        f"checksums {trained_ddp:.9g} and {trained_fsdp:.9g}",
    )
    check_checkpoints(report, world, ranks)


def check_checkpoints(report, world: int, ranks: dict[int, dict]) -> None:
    files = [ranks[r]["ddp_file"] for r in sorted(ranks)]
    report.check(
        f"{world} ranks, DDP's checkpoint: one file of the whole model, read whole by every rank, as trained",
        all(
            f["loaded"] == f["trained"] == files[0]["trained"] and f["bytes"] >= ranks[0]["ddp"]["model"] for f in files
        ),
        f"{files[0]['bytes']} bytes read by each of {world} ranks",
    )
    dcp = [ranks[r]["dcp"] for r in sorted(ranks)]
    report.check(
        f"{world} ranks, DCP's checkpoint: a shard file per rank and .metadata, loaded whole by one process",
        all(d["shards"] == world and d["metadata"] for d in dcp) and dcp[0]["loaded"] == dcp[0]["trained"],
        f"{world} files of {dcp[0]['wrote']} bytes; checksum trained {dcp[0]['trained']}, loaded {dcp[0]['loaded']}",
    )
