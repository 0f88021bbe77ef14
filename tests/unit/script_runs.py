"""Runs of a user's script written by hand, event by event, for the script judge's tests: two
nodes of one rank each, progress printed as 'step N', times in seconds from 0. What each
run did is plain from its lines, so the tests can say the facts the judge should find."""

from __future__ import annotations

from lab.exercises.seen import Seen
from lab.topology import Topology

FAULT_TIME = 7.5


def record(t: float, event: str, rank: int = 0, restart: int = 0, **fields) -> dict:
    return {
        "time": t,
        "event": event,
        "rank": rank,
        "local_rank": 0,
        "node": f"node{rank}",
        "restart": restart,
        "pid": 100 + 10 * restart + rank,
        **fields,
    }


def steps(values: range | list[int], t0: float, restart: int = 0, ranks=(0, 1), unit: str = "step") -> list[dict]:
    """Each rank's 'step N' lines, one value a second from t0."""
    return [
        record(t0 + i + 0.01 * rank, "step", rank, restart, step=value, unit=unit, source="output")
        for i, value in enumerate(values)
        for rank in ranks
    ]


def group(t: float, restart: int = 0) -> list[dict]:
    """Both ranks started at t, their process group up a second later."""
    return [record(t, "start", r, restart) for r in (0, 1)] + [
        record(t + 1, "rendezvous_done", r, restart, world_size=2) for r in (0, 1)
    ]


def completed(t: float, restart: int = 0) -> list[dict]:
    return [record(t, "exit", r, restart, reason="completed", checksum="0x1.8p+0") for r in (0, 1)]


def extra(**more) -> dict:
    base = {
        "script": "train.py",
        "script_args": ["--epochs", "3"],
        "deadline_s": 180.0,
        "workdir": "/runs/work/kill-worker",
        "ckpt_dir": None,
        "found_at_start": [],
        "compared": None,
    }
    return {**base, **more}


def clean_run(fire_point: dict | None = None, **more) -> Seen:
    """The fault-free reference: steps 0-4 on both ranks, both nodes exit 0."""
    events = group(1) + steps(range(5), 3) + completed(8)
    return Seen(
        "script",
        "local",
        Topology(nodes=2, nproc_per_node=1),
        codes={"node0": 0, "node1": 0},
        events=events,
        extra=extra(fire_point=fire_point, **more),
    )


def killed_run(recovery: str = "restart", resumed_at: int = 3, **more) -> Seen:
    """Rank 1 killed at 7.5 s after step 4 (a checkpoint saved after step 2, at 5.5 s); the
    group restarted at 9 s, rank 0 loaded ckpt.pt and both went on from resumed_at to 9."""
    fault = {"fault": "kill_worker", "node": "node1", "time": FAULT_TIME, "args": {"local_rank": 0}, "rank": 1}
    events = (
        group(1)
        + steps(range(5), 3)
        + [record(5.5, "saved", 0, path="ckpt.pt", how="torch.save")]
        + [record(7.6, "exit", 0, reason="exception", error="RuntimeError: Connection closed by peer", where="t.py:9")]
        + group(9, restart=1)
        + [record(10.5, "loaded", 0, 1, path="ckpt.pt", how="torch.load")]
        + steps(range(resumed_at, 10), 11, restart=1)
        + completed(11 + 10 - resumed_at, restart=1)
    )
    fire = {"source": "output", "unit": "step", "value": 4}
    return Seen(
        "script",
        "local",
        Topology(nodes=2, nproc_per_node=1),
        faults=[fault],
        codes={"node0": 0, "node1": 0},
        events=sorted(events, key=lambda e: e["time"]),
        extra=extra(
            **{
                "fault": fault,
                "fire": fire,
                "target": 1,
                "recovery": recovery,
                "rerun": False,
                "forensics": None,
                **more,
            }
        ),
    )
