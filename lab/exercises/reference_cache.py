"""The uninterrupted reference run's final weights, remembered per identical job.

A drill that claims "bit-identical to an uninterrupted run" needs that run's checksum. The
trainer is deterministic: the same lab source, torch, topology and arguments give the same
weights bit for bit (that is the claim the drills test). So a reference is run once per
identical job and its checksum kept; the next drill of the same job compares against it
and says so in its report ("reference": "cached"), at about a third of the drill's time.

Kept only for jobs whose code is this machine's own (the local runtime): a container or a
Ray machine runs its own copy of the lab and of torch, which this key cannot see.

The cache lives in $XDG_CACHE_HOME/torchrun-lab/references (else ~/.cache/...), a 0700
folder of the user's; an entry is read only when it is a regular file of the user's, never
through a link. Anything else there is ignored (and the reference run again). Delete the
folder to forget every reference.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from importlib import metadata
from pathlib import Path

import lab
from lab import files
from lab.topology import Topology

MAX_ENTRY_BYTES = 4096


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchrun-lab" / "references"


def lab_source_digest() -> str:
    """Every Python file of the lab, by path and content: any change is a new reference."""
    root = Path(lab.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def job_key(topology: Topology, script: str, args: list[str]) -> str:
    """What decides the final weights: the lab's source, torch, the job's shape and arguments."""
    shape = {
        "lab": lab_source_digest(),
        "torch": metadata.version("torch"),
        "script": Path(script).name,
        "nodes": topology.nodes,
        "nproc_per_node": topology.nproc_per_node,
        "backend": topology.backend,
        "parallel": topology.parallel,  # the trainer's --parallel, through the node's environment
        "args": list(args),
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:32]


def recall(key: str) -> set[str] | None:
    """The checksums remembered for this job; None when there are none to trust."""
    raw = files.read_regular(cache_dir() / f"{key}.json", MAX_ENTRY_BYTES, owner=os.geteuid())
    try:
        body = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    found = body.get("checksums") if isinstance(body, dict) else None
    if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], str):
        return None  # a reference is one checksum, agreed by every rank
    return set(found)


def remember(key: str, checksums: set[str]) -> None:
    """Keep a reference that is one checksum on every rank (anything else is not one to reuse)."""
    if len(checksums) != 1:
        return
    folder = cache_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return  # not a folder of ours: the reference is simply run again next time
    files.write_text(folder / f"{key}.json", json.dumps({"checksums": sorted(checksums)}) + "\n")
