"""A run dir on Ray machines that share no disk: what each node writes, copied to the driver's.

A Ray cluster's machines often have only disks of their own (a KubeRay cluster, cloud VMs).
The driver writes a token into its run dir before it places the nodes' agents; an agent that
does not find it there is on a disk of its own (lab.runtimes.ray_node), makes the run dir there
itself, and its node writes into that copy. What the node writes (its log, its ranks' and
agent's events, its exporters' Prometheus targets, a rerun's events) comes to the driver's run
dir through the agent (`MachineAgent.changes`): every half second, by a process on the driver's
machine that `lab up` (or `lab run`, a drill) starts and `lab down` stops (ray_follower); at once when a command
attaches (`lab status`, a drill's node agents); and before a node's end is reported, so that a
verdict is drawn from the whole record. Checkpoints stay on their machine: each node keeps its
own, and a node that lacks the newest gets it from a peer (the trainer's peer recovery, as
between Kubernetes pods).

A node's own folder (nodes/NAME/) keeps its name on the driver; any other file gets the node's
name before its suffix (node1's events/rank2.jsonl is events/rank2.node1.jsonl): after a restart
a rank may run on another machine, and two machines' files of one name must not be mixed. The
readers glob the events and sort them by time, so they read every copy.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import Any

from lab import files
from lab.errors import LabError
from lab.runtimes.base import Log
from lab.runtimes.ray_calls import ray_get
from lab.topology import Topology

SHARE_TOKEN = ".shared-disk-token"  # in the driver's run dir: a machine that reads it shares the disk
KEPT_ON_THE_MACHINE = "checkpoints"  # a folder of this name (the run's, a rerun's) is never copied
CHUNK = 4 << 20  # the most bytes one call brings: a larger record comes over several calls
PERIOD_S = 0.5
KNOWN_DIR = ".mirror"  # in the driver's run dir: how far each node's files were copied, and the lock
# What the lab writes for the nodes to read, carried to each machine with a disk of its own: hang
# forensics' request (lab.health.hang_dump), in the run's events or a rerun's.
DOWNLINKS = ("events/forensics/request", "*/events/forensics/request")
Known = dict[str, tuple[int, int, int]]  # a file's (inode, mtime_ns, bytes sent) at its last copy


def changes(run_dir: Path, known: Known, budget: int = CHUNK) -> list[tuple[str, int, bytes, int, int]]:
    """(relative path, offset, bytes, inode, mtime_ns) of what is new under run_dir since known:
    a file that grew from where its copy ends, any other change whole (offset 0). Runs on the
    node's machine; no link is followed (files.regular_files)."""
    pieces: list[tuple[str, int, bytes, int, int]] = []
    for info, relative in files.regular_files(run_dir):
        if KEPT_ON_THE_MACHINE in relative.parts or str(relative) == SHARE_TOKEN or budget <= 0:
            continue
        ino, mtime, sent = known.get(str(relative), (-1, -1, 0))
        if (ino, mtime, sent) == (info.st_ino, info.st_mtime_ns, info.st_size):
            continue
        offset = sent if ino == info.st_ino and info.st_size > sent else 0
        read = files.read_from(run_dir / relative, offset, budget)
        if read is None:
            continue  # gone, or replaced by something that is not a file, since it was listed
        data, _ = read
        budget -= len(data)
        pieces.append((str(relative), offset, data, info.st_ino, info.st_mtime_ns))
    return pieces


def new_share_token(run_dir: Path) -> str:
    """A fresh token in run_dir: the machines that read it there share this machine's disk."""
    token = secrets.token_hex(16)
    files.write_beneath(run_dir, SHARE_TOKEN, token)
    return token


def refusal(nodes: list[Any], where: list[dict], topology: Topology, script: str, run_dir: Path) -> str:
    """Why this job cannot run on these machines ("" where it can), in one line: a folder already
    at the run dir's path on a machine with a disk of its own (the agent leaves it alone), a job
    whose checkpoint is one folder every rank writes, a script a machine does not have."""
    found = [f"{n.name} ({n.address})" for n, w in zip(nodes, where, strict=True) if w["found_there"]]
    if found:
        return (
            f"{', '.join(found)}: {run_dir} is already there, on a disk this machine does not share (an earlier "
            f"lab's run dir?); remove it there, or choose another --run-dir"
        )
    own = [n for n, w in zip(nodes, where, strict=True) if w["own_disk"]]
    if own and topology.parallel != "ddp":
        return (
            f"--parallel {topology.parallel}: DCP's step is one folder of every rank's shards, and "
            f"{', '.join(n.name for n in own)} shares no disk with this machine; give the machines one "
            f"(NFS, docs/ray.md) or use --parallel ddp"
        )
    seen = ray_get([n.actor.sees.remote(script) for n in own], 60, "the machines to look for the script")
    lacking = [n.name for n, sees in zip(own, seen, strict=True) if not sees]
    if lacking:
        return (
            f"{script} is not on {', '.join(lacking)}'s machine, which shares no disk with this one: put it at "
            f"the same path on every machine (the lab's own workloads come with the lab)"
        )
    return ""


def put(run_dir: Path, relative: str, data: bytes) -> None:
    """A DOWNLINK from the driver, written on this machine whole at once (a rank polling it reads
    the old request or the new one, never half)."""
    if not any(PurePath(relative).match(pattern) for pattern in DOWNLINKS) or ".." in PurePath(relative).parts:
        raise LabError(f"{relative!r}: not a file the lab carries to the nodes")
    files.write_beneath(run_dir, relative, data.decode())


def placed(node: str, relative: str) -> str:
    """Where node's file goes in the driver's run dir (see the module's docstring)."""
    path = Path(relative)
    if path.parts[:2] == ("nodes", node):
        return relative
    return str(path.with_name(f"{path.stem}.{node}{path.suffix}"))


class Mirror:
    """Copies the files of the nodes on disks of their own (name: MachineAgent actor) into run_dir.

    Any process may copy (the one that runs the job, `lab status` from another shell, a drill's
    node agents): one at a time, under a lock in the run dir, each going on from where the last
    copy ended (KNOWN_DIR holds each node's), so that no two ever write one file."""

    def __init__(self, run_dir: Path, agents: dict[str, Any], log: Log = print):
        self.run_dir, self.agents, self.log = run_dir, agents, log
        self._lock = threading.Lock()
        self._failed: set[str] = set()
        self._pushed: dict[tuple[str, str], bytes] = {}

    def sync(self, names: list[str] | None = None) -> None:
        """Bring what the nodes (all, or those named) wrote since the last copy."""
        wanted = [n for n in (names if names is not None else list(self.agents)) if n in self.agents]
        if not wanted:
            return
        with self._lock, self._runs_alone():
            for name in wanted:
                self._pull(name)

    @contextlib.contextmanager
    def _runs_alone(self) -> Iterator[None]:
        files.put_beneath(self.run_dir, f"{KNOWN_DIR}/lock", b"", 0)  # made in place: one file every process locks
        fd = files.open_nofollow(self.run_dir / KNOWN_DIR / "lock", os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _pull(self, name: str) -> None:
        saved = files.read_regular(self.run_dir / KNOWN_DIR / f"{name}.json", 1 << 24)
        known: Known = {k: (v[0], v[1], v[2]) for k, v in json.loads(saved).items()} if saved else {}
        try:
            self._push(name)
            while self._bring(name, known) >= CHUNK:
                pass
        except Exception as e:  # an actor gone with its machine, a cluster lost: said once, not raised
            if name not in self._failed:
                self._failed.add(name)
                self.log(f"note: {name}'s files no longer come to this run dir: {str(e).splitlines()[0]}")
        finally:
            files.write_beneath(self.run_dir, f"{KNOWN_DIR}/{name}.json", json.dumps(known))

    def _bring(self, name: str, known: Known) -> int:
        """One call's worth of what changed on name's machine, written here; returns its bytes."""
        pieces = ray_get(self.agents[name].changes.remote(known), 60, f"{name}'s files")
        for relative, offset, data, ino, mtime in pieces:
            known[relative] = (ino, mtime, offset + len(data))
            try:
                files.put_beneath(self.run_dir, placed(name, relative), data, offset)
            except (files.UnsafePath, OSError) as e:  # a link planted here: never written through
                self.log(f"note: {name}'s {relative} was not copied: {e}")
        return sum(len(piece[2]) for piece in pieces)

    def _push(self, name: str) -> None:
        """The DOWNLINKS written here since the last push, to name's machine."""
        for pattern in DOWNLINKS:
            for path in self.run_dir.glob(pattern):
                relative = str(path.relative_to(self.run_dir))
                data = files.read_regular(path, 1 << 16)
                if data is not None and self._pushed.get((name, relative)) != data:
                    ray_get(self.agents[name].put.remote(relative, data), 60, f"{relative} to {name}")
                    self._pushed[(name, relative)] = data
