"""Several ranks saving one checkpoint file: each rank's torch.save opens the same file and writes
its own copy into it, at once. A rank killed mid-write leaves it torn for every rank's resume,
and a file read while another rank rewrites it is neither copy. pytorch/examples' imagenet
saves from 4 ranks at 2 x 2 on one disk, minGPT-ddp from 2. The saves name their file by
device and inode (lab.node.user_script.file_identity): one file on one machine, or on a disk the
nodes share; each pod's own volume, or a save through a temporary file and a rename, are not
one file and are not flagged. DCP's saves are one checkpoint written by every rank by design."""

from __future__ import annotations

from lab.health.events import Event

ADVICE = "save from one rank (`if dist.get_rank() == 0:`), or one file per rank"


def shared_writes(events: list[dict]) -> list[dict]:
    """[{"path", "ranks"}] for each file that more than one rank saved with torch.save."""
    writers: dict[tuple, dict] = {}
    for e in events:
        if e["event"] != Event.SAVED or e.get("how") != "torch.save" or not e.get("file"):
            continue
        found = writers.setdefault((*e["file"], e["path"].rsplit("/", 1)[-1]), {"path": e["path"], "ranks": set()})
        found["ranks"].add(e["rank"])
    return [{"path": w["path"], "ranks": sorted(w["ranks"])} for w in writers.values() if len(w["ranks"]) > 1]


def said(shared: list[dict]) -> str:
    """One clause for the verdict's finding, or ""."""
    if not shared:
        return ""
    first = shared[0]
    more = f" (and {len(shared) - 1} more file(s))" if len(shared) > 1 else ""
    ranks = ", ".join(str(rank) for rank in first["ranks"])
    return (
        f"; {len(first['ranks'])} ranks ({ranks}) each wrote {first['path']}{more}, one file at once: a rank "
        f"killed mid-write tears it for all; {ADVICE}"
    )
