"""Hang forensics, the controller's side: ask every rank for its Flight Recorder entries and
stacks (lab.health.hang_dump), then say which rank is behind, in which collective.

    forensics = collect(drill.events_dir, world_size)
    forensics["finding"]  # "rank 1 never entered all_reduce #27; ..."

Called while the job hangs: before the process-group timeout turns the hang into errors
and torchrun tears the ranks down, which is when their state is lost.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab import files
from lab.health.events import Event, ExitReason
from lab.health.hang_dump import DIRECTORY

ANSWER_WITHIN_S = 3.0
LIBRARY = ("/site-packages/", "<frozen", "/lab/health/hang_dump.py", "/threading.py")
# Where a main thread that waits in a collective stands: torch.distributed's call, or the backward
# pass that runs DDP's all-reduces (gloo's Flight Recorder never marks an entry completed, so the
# stack is what tells a rank waiting inside a collective from one stuck in its own code).
IN_COLLECTIVE = ("/torch/distributed/", "/torch/autograd/")


def collect(
    events_dir: Path, world_size: int, wait_s: float = ANSWER_WITHIN_S, relay: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """Request dumps, wait up to wait_s for every rank, analyse what came back. relay: carries the
    request to the nodes and their dumps back where they do not share events_dir (Runtime.gather)."""
    directory = events_dir / DIRECTORY
    request = f"{time.time():.6f}"
    # The ranks (in containers too) write into the events folder: no link there is followed.
    files.write_beneath(events_dir, f"{DIRECTORY}/request", request)
    asked = time.monotonic()
    deadline = asked + wait_s
    dumps: dict[int, dict] = {}
    while time.monotonic() < deadline and len(dumps) < world_size:
        relay()
        for rank in range(world_size):
            if rank not in dumps:
                answer = _answer(directory, rank, request)
                if answer is not None:
                    dumps[rank] = answer
        time.sleep(0.1)
    return {**analyse(dumps, world_size), "seconds": round(time.monotonic() - asked, 2)}


def _answer(directory: Path, rank: int, request: str) -> dict | None:
    """The rank's dump for this request: rank<N>.json, or its copy from a machine with a disk of
    its own (rank<N>.<node>.json, lab.runtimes.ray_mirror)."""
    for path in [directory / f"rank{rank}.json", *sorted(directory.glob(f"rank{rank}.*.json"))]:
        try:
            record = json.loads(files.read_regular(path, 16 << 20) or b"")
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("request") == request:
            return record
    return None


def where(stack: list[str]) -> list[str]:
    """The frames of the rank's own code (the script, the lab's workload), innermost last."""
    return [f for f in stack if not any(part in f for part in LIBRARY)]


def main_stack(record: dict) -> list[str]:
    threads = record.get("stacks", {})
    return threads.get("MainThread") or next(iter(threads.values()), [])


def analyse(dumps: dict[int, dict], world_size: int) -> dict[str, Any]:
    """Per rank: its last collective and where its main thread stands; then who is behind."""
    ranks: dict[int, dict] = {}
    for rank, record in sorted(dumps.items()):
        entries = [e for e in record.get("flight_recorder", []) if e.get("pg") == "0"] or record.get(
            "flight_recorder", []
        )
        last = entries[-1] if entries else None
        innermost = main_stack(record)[-1:]
        in_collective = bool(innermost) and any(part in innermost[0] for part in IN_COLLECTIVE)
        ranks[rank] = {"last_collective": last, "stack": where(main_stack(record))[-3:], "in_collective": in_collective}
    silent = [r for r in range(world_size) if r not in dumps]
    seqs = {r: info["last_collective"]["seq"] for r, info in ranks.items() if info["last_collective"]}
    front = max(seqs.values(), default=None)
    # Behind the front, a rank that waits inside its last collective is not behind by its own
    # doing: a rank ahead passed that collective, so what it waits for was sent, and has not
    # arrived (a partition cut mid-collective leaves ranks so). One in its own code is.
    short_of_front = sorted(r for r, seq in seqs.items() if front is not None and seq < front)
    waiting = [r for r in short_of_front if ranks[r]["in_collective"]]
    behind = [r for r in short_of_front if r not in waiting]
    finding = _finding(ranks, silent, behind, front, waiting)
    return {
        "answered": sorted(dumps),
        "silent": silent,
        "behind": behind,
        "waiting_behind": waiting,
        "collective": _describe(
            next(
                (
                    i["last_collective"]
                    for i in ranks.values()
                    if i["last_collective"] and i["last_collective"]["seq"] == front
                ),
                None,
            )
        ),
        "ranks": {str(r): info for r, info in ranks.items()},
        "suspects": silent + behind,
        "finding": finding,
    }


def _describe(entry: dict | None) -> str:
    if not entry:
        return ""
    return f"{entry['op']} #{entry['seq']} (sizes {entry['sizes']})"


def _finding(
    ranks: dict[int, dict], silent: list[int], behind: list[int], front: int | None, waiting_behind: list[int]
) -> str:
    if not ranks:
        return "no rank answered: none recorded a collective, or all are stopped"
    waiting = next(
        (i["last_collective"] for i in ranks.values() if i["last_collective"] and i["last_collective"]["seq"] == front),
        None,
    )
    at = next((i["stack"][-1] for i in ranks.values() if i["last_collective"] == waiting and i["stack"]), "")
    parts = []
    if silent:
        parts.append(
            f"rank {', '.join(map(str, silent))} did not answer (stopped, or stuck holding the GIL)"
            + (f" while the others wait in {_describe(waiting)}" + (f" at {at}" if at else "") if waiting else "")
        )
    for rank in behind:
        info = ranks[rank]
        stack = info["stack"][-1] if info["stack"] else "an unknown place"
        parts.append(
            f"rank {rank} never entered {_describe(waiting)}: its last was #{info['last_collective']['seq']}; "
            f"it stands at {stack}"
        )
    if parts:
        return "; ".join(parts)
    if waiting_behind:
        ahead = [r for r, i in ranks.items() if i["last_collective"] == waiting]
        earlier = ranks[waiting_behind[0]]["last_collective"]
        return (
            f"rank {', '.join(map(str, waiting_behind))} still wait in {_describe(earlier)}, which rank "
            f"{', '.join(map(str, ahead))} passed: none is behind (a network or peer problem, not a stuck rank)"
        )
    return f"every rank entered {_describe(waiting)}: none is behind (a network or peer problem, not a stuck rank)"


def where_they_stand(
    events_dir: Path, world_size: int, events: list[dict], relay: Callable[[], None] = lambda: None
) -> str:
    """Where each rank of a job that outlived its bound stands, in one line, from the ranks' own
    stacks, and whose script had returned: a job still running after every rank printed its last
    line names the line it waits on (a CI run once ended "still running at the bound" with
    nothing to say where the ranks waited)."""
    found = collect(events_dir, world_size, relay=relay)
    standing = [
        f"rank {rank} at {info['stack'][-1] if info['stack'] else 'an unknown place'}"
        for rank, info in sorted(found["ranks"].items(), key=lambda item: int(item[0]))
    ]
    if found["silent"]:
        silent = ", ".join(map(str, found["silent"]))
        standing.append(f"rank {silent} did not answer (ended, stopped, or holding the GIL)")
    done = returned(events)
    if done:  # past its script's end: what waits is the process's exit, or its agent
        standing.append(f"the script had returned on rank {', '.join(map(str, done))} (its exit recorded)")
    return "; ".join(standing)


def returned(events: list[dict]) -> list[int]:
    """The ranks whose latest start or exit record is a completed exit: their script returned."""
    latest: dict[int, dict] = {}
    for event in events:
        if event["event"] in (Event.START, Event.EXIT):
            latest[event["rank"]] = event
    return sorted(r for r, e in latest.items() if e["event"] == Event.EXIT and e.get("reason") == ExitReason.COMPLETED)
