"""Drill runs written by hand, record by record, for the judges' unit tests. Every time is a
binary fraction, so each span is exact and the facts a judge should report can be worked out by
hand beside the run (tests/unit/test_drill_verdicts_by_hand.py and the judges' *_by_hand.py
tests). No process runs."""

from __future__ import annotations

from lab.exercises.seen import Seen
from lab.topology import Topology

FAULT = 10.0
CHECKSUM = "-0x1.6d72ac7b60000p+1"


# hang-rank's: rank 1 frozen (SIGSTOP) at the fault, and the forensics that named it.
FREEZE = {"fault": "pause_worker", "node": "node0", "time": FAULT, "args": {"local_rank": 1}, "rank": 1}
FOUND = {
    "suspects": [1],
    "collective": "all_reduce #64 (sizes [[1]])",
    "finding": "rank 1 never entered all_reduce #64",
}


def rec(t: float, event: str, rank: int = 0, restart: int = 0, **fields) -> dict:
    """One rank's event record."""
    return {"time": t, "event": event, "rank": rank, "restart": restart, **fields}


def agent(t: float, name: str, node: str = "node0", message: str = "", **metadata) -> dict:
    """One agent record: a torchelastic event (its message read) or one the lab adds."""
    return {"time": t, "node": node, "name": name, "message": message, "event": {"name": name, "metadata": metadata}}


def finished(t: float, ranks: range, restart: int = 1, step: int = 60, checksum: str = CHECKSUM) -> list[dict]:
    """Every rank's completed exit, with its final weights' checksum."""
    return [rec(t, "exit", r, restart, reason="completed", step=step, checksum=checksum) for r in ranks]


def regrouped(t: float, node: str = "node0") -> list[dict]:
    """An agent asking to join the next round, and joining it, a quarter second apart."""
    return [
        agent(t, "rdzv", node, message=f"{node} attempts to join the next round"),
        agent(t + 0.25, "rdzv", node, message=f"{node} has joined round 1"),
    ]


def seen_of(exercise: str, topology: Topology, faults: list[dict], events: list[dict], **more) -> Seen:
    """What a drill saw: every node exited 0 and the reference matched, unless said otherwise."""
    more.setdefault("codes", {f"node{i}": 0 for i in range(topology.nodes)})
    more.setdefault("reference", [CHECKSUM])
    more.setdefault("reference_source", "ran")
    return Seen(exercise, "local", topology, faults=faults, events=events, **more)
