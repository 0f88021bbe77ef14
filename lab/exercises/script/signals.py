"""Where a drill on the user's script reads its progress, and when the fault fires.

In order of preference: the steps the script reports itself (lab.progress.step), the
steps read from its output (--progress-regex), checkpoint files appearing in --ckpt-dir,
and otherwise wall time. The report says which one was used.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from lab import files
from lab.errors import LabError
from lab.health.events import Event, restarted_at
from lab.workloads.checkpoint_files import newest_file

STEP_SOURCES = ("helper", "output")  # lab.progress.step, then the regex on the output
FIRE_POINT_TIMEOUT_S = 300.0  # from the start until the fault's step: a script that never gets there


def step_source(events: list[dict]) -> tuple[str, str] | None:
    """(source, unit) of the step events the verdict counts: the helper's if any, else the
    output's; the unit the most lines give (a script printing "epoch" and "step" counts in one)."""
    for source in STEP_SOURCES:
        units = Counter(e.get("unit", "step") for e in events if e["event"] == Event.STEP and e.get("source") == source)
        if units:
            return source, units.most_common(1)[0][0]
    return None


def series(events: list[dict], rank: int, source: str, unit: str) -> list[dict]:
    """rank's step events of that source and unit, in time order."""
    return [
        e
        for e in events
        if e["event"] == Event.STEP
        and e["rank"] == rank
        and e.get("source") == source
        and e.get("unit", "step") == unit
    ]


def reporting_rank(events: list[dict], source: str, unit: str, preferred: int = 0) -> int:
    """The rank whose progress to read: `preferred` if it reports about as often as the rank that
    reports most, else the lowest of those that report most (many scripts print from rank 0
    alone; DDP keeps every rank at the same step). A rank that printed one matching line once (a
    banner) is never the one watched: a fault waiting on it never fired."""
    counts = Counter(
        e["rank"]
        for e in events
        if e["event"] == Event.STEP and e.get("source") == source and e.get("unit", "step") == unit
    )
    if not counts:
        return preferred
    most = max(counts.values())
    if 2 * counts.get(preferred, 0) >= most:
        return preferred
    return min(rank for rank, count in counts.items() if count == most)


def progress(events: list[dict], source: str, unit: str, preferred: int = 0) -> list[dict]:
    """The job's progress: the step events of reporting_rank, in time order."""
    return series(events, reporting_rank(events, source, unit, preferred), source, unit)


def segments(events: list[dict], fault_time: float, source: str, unit: str) -> dict[str, Any]:
    """Rank 0's progress before its workers started again after the fault, and after."""
    mine = progress(events, source, unit)
    restarted = restarted_at(events, fault_time)
    before = [e["step"] for e in mine if e["time"] < (restarted or fault_time)]
    after = [e["step"] for e in mine if restarted is not None and e["time"] > restarted]
    return {
        "first": before[0] if before else None,
        "reached": max(before, default=None),
        "resumed_at": after[0] if after else None,
        "last": after[-1] if after else None,
    }


def resumed_by_rank(events: list[dict], fault_time: float, source: str, unit: str) -> dict[int, int]:
    """Each rank's first progress value once the workers started again after the fault (ranks that
    print none are left out). Ranks of one DDP job resume together; ones that do not started
    from different checkpoints, or from none."""
    restarted = restarted_at(events, fault_time)
    if restarted is None:
        return {}
    # Up to the group's next change of size (an elastic job grown back): ranks that join then
    # resume where the grown group does, later than the survivors did.
    worlds = sorted((e["time"], e["world_size"]) for e in events if e["event"] == Event.RENDEZVOUS_DONE)
    first = next((size for when, size in worlds if when > restarted), None)
    until = min((when for when, size in worlds if when > restarted and size != first), default=float("inf"))
    ranks = sorted({e["rank"] for e in events if e["event"] == Event.STEP and e.get("source") == source})
    found = {}
    for rank in ranks:
        after = [e["step"] for e in series(events, rank, source, unit) if restarted < e["time"] < until]
        if after:
            found[rank] = after[0]
    return found


def rates(events: list[dict], faults: list[dict], source: str, unit: str) -> dict[str, float | None]:
    """Rank 0's progress per second before the fault (from its first step, at most as long
    as the fault) and while the fault lasted (until the next fault record: its release)."""
    start = faults[0]["time"]
    end = faults[1]["time"] if len(faults) > 1 else max(e["time"] for e in events)
    times = [e["time"] for e in progress(events, source, unit)]

    def rate(since: float, until: float) -> float | None:
        inside = [t for t in times if since <= t < until]  # steps per second between the first and last seen
        return round((len(inside) - 1) / (inside[-1] - inside[0]), 3) if len(inside) >= 2 else None

    first = min((t for t in times if t < start), default=start)  # not the start-up: from the first step on
    return {"before": rate(max(first, start - (end - start)), start), "during": rate(start, end)}


def has_checkpoint(directory: Path | None) -> bool:
    return directory is not None and directory.is_dir() and newest_file(directory) is not None


def listing(directory: Path | None) -> list[str]:
    """What is already in a checkpoint dir (up to 5 names): a run that should start clean."""
    if directory is None or not directory.is_dir():
        return []
    return sorted(str(rel) for _, rel in files.regular_files(directory))[:5]  # the job's: no link followed


def seconds_running(events: list[dict], at_time_s: float) -> float | None:
    """Seconds since the workers' process group was up; None before. Not since they started:
    importing torch takes seconds, far more on a loaded machine, and a fault fired then hits a
    worker still starting (no checkpoint yet, no handler for the rank-exception signal). A
    script that makes no process group the lab sees is timed from its start, at 3 x at_time_s."""
    now = time.time()
    joined = [e["time"] for e in events if e["event"] == Event.RENDEZVOUS_DONE]
    if joined:
        return now - min(joined)
    starts = [e["time"] for e in events if e["event"] == Event.START]
    if starts and now - min(starts) >= 3 * at_time_s:
        return now - min(starts)
    return None


def wait_fire_point(drill: Any, target: int, at_step: int, at_time_s: float, ckpt: Path | None) -> dict | None:
    """Block until the fault should fire; returns how it was decided ({source, unit, value, rank}),
    or None when the job ended first. With steps: when `target` reaches at_step (or, where the
    target prints no progress, the lowest rank that does: the job is at one step). Without any
    step at_time_s after the workers' process group was up (seconds_running): once a checkpoint
    exists (with --ckpt-dir), else at once (wall time)."""
    deadline = time.monotonic() + FIRE_POINT_TIMEOUT_S
    drill.progress(f"waiting for rank {target} at step {at_step} (or {at_time_s:g} s without a step signal)")
    next_check = 0.0
    while time.monotonic() < deadline:
        events = drill.events()
        found = step_source(events)
        if found:  # the target's own progress, or the job's where the target prints none
            watched = reporting_rank(events, *found, preferred=target)
            values = [e["step"] for e in series(events, watched, *found)]
            if values and max(values) >= at_step:
                return {"source": found[0], "unit": found[1], "value": max(values), "rank": watched}
        else:
            since = seconds_running(events, at_time_s)
            if since is not None and since >= at_time_s:
                if ckpt is None:
                    return {"source": "wall time", "unit": "s", "value": round(since, 1)}
                if has_checkpoint(ckpt):
                    return {"source": "checkpoint files", "unit": "s", "value": round(since, 1)}
        if time.monotonic() >= next_check:  # asking every node costs a Ray call each: once a second
            next_check = time.monotonic() + 1.0
            if all(code is not None for code in drill.exit_codes().values()):
                return None
        time.sleep(0.1)
    raise LabError(f"rank {target} did not reach step {at_step} within {FIRE_POINT_TIMEOUT_S:.0f} s")


def why_unfired(events: list[dict], target: int, at_step: int, at_time_s: float, ckpt_dir: str | None) -> str:
    """What kept the fault from firing before the job ended, and the flag that helps: with steps
    read, the last one (--at-step); with none, the seconds it ran against --at-time (or the
    checkpoint that never appeared in --ckpt-dir), and --progress-regex for its progress."""
    found = step_source(events)
    if found:
        watched = reporting_rank(events, *found, preferred=target)
        last = max((e["step"] for e in series(events, watched, *found)), default=None)
        return (
            f"rank {watched}'s {found[1]} never reached {at_step} (its last was {last}): choose a lower "
            f"--at-step (at most {last})"
        )
    joined = [e["time"] for e in events if e["event"] == Event.RENDEZVOUS_DONE]
    began = min(joined or [e["time"] for e in events] or [0.0])
    lasted = max((e["time"] for e in events), default=began) - began
    unread = "it printed no step the lab could read (--progress-regex says how it prints them)"
    if ckpt_dir and lasted >= at_time_s:
        return f"{unread}, and no checkpoint appeared in --ckpt-dir {ckpt_dir} (the fault waits for one)"
    return (
        f"{unread}, so the fault waited for --at-time {at_time_s:g} s after its process group was up; it ended "
        f"{lasted:.1f} s after: choose a lower --at-time"
    )


HUNG_FOR_GOOD_S = 20.0  # how long a drill watches a hang nothing in torch would end before --deadline


def hang_wait_s(events: list[dict], deadline_s: float) -> tuple[float, float | None]:
    """(how long to wait for a hung job to end, the shortest process-group timeout its ranks
    gave). Where that timeout is known and longer than the deadline (torch's default for gloo
    is 30 minutes), nothing in torch ends the hang before the deadline: the drill watches it
    for HUNG_FOR_GOOD_S, not for the deadline."""
    timeouts = [e["pg_timeout_s"] for e in events if e["event"] == Event.RENDEZVOUS_DONE and e.get("pg_timeout_s")]
    shortest = min(timeouts, default=None)
    if shortest is not None and shortest > deadline_s:
        return min(deadline_s, HUNG_FOR_GOOD_S), shortest
    return deadline_s, shortest


def still_hung(waited_s: float, pg_timeout_s: float | None) -> str:
    """The verdict's words for a job still running when the drill stopped waiting."""
    if pg_timeout_s is None:
        return (
            f"still running {waited_s:g} s after the fault: nothing ended the hang (a process-group timeout in "
            "init_process_group would; gloo's default is 30 minutes)"
        )
    return (
        f"still running {waited_s:g} s after the fault, and its process-group timeout is {pg_timeout_s:g} s: "
        "nothing would end the hang before then (give init_process_group a timeout= shorter than --deadline)"
    )
