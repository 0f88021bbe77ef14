"""Reading a drill's outcome from the event logs: restarts, lost steps, the recovery breakdown."""

from __future__ import annotations

from lab.exercises import samples
from lab.health.events import AgentEvent, Event, ExitReason, faulted_run_end, read_agent_events

agent_events = read_agent_events  # torchelastic's agent events, as the drills read them


def first_time(records: list[dict], after: float, predicate) -> float | None:
    return min((r["time"] for r in records if r["time"] >= after and predicate(r)), default=None)


def recovery_breakdown(events: list[dict], agents: list[dict], fault_time: float) -> dict:
    """Seconds from the fault to the first completed step of the next worker group.

    detect: fault until an agent's monitor loop sees the failure; teardown: until an agent
    asks to join the next rendezvous round; rendezvous: until it has joined; worker init:
    until the new workers have a process group (process start, torch import,
    init_process_group); checkpoint load; first step. The earliest node counts at each
    stage. Stages are found by time, not restart count: a node brought back by the
    runtime starts its count at 0 again.
    """
    detect = first_time(agents, fault_time, lambda r: r["name"] == AgentEvent.FAILURE_DETECTED)
    join = first_time(agents, detect or fault_time, lambda r: "attempts to join" in r["message"])
    joined = first_time(agents, join or fault_time, lambda r: "has joined round" in r["message"])
    ready = first_time(events, joined or fault_time, lambda e: e["event"] == Event.RENDEZVOUS_DONE)
    loaded = first_time(
        events, ready or fault_time, lambda e: e["event"] in (Event.CHECKPOINT_LOADED, Event.NO_CHECKPOINT)
    )
    # A step with no new group before it is a survivor's step in flight, not a recovery (an
    # unrecovered hang once showed "first step 0.0 s after the fault").
    regrouped = ready or joined
    first_step = first_time(events, loaded or regrouped, lambda e: e["event"] == Event.STEP) if regrouped else None
    stages = [
        ("detect", fault_time, detect),
        ("teardown", detect, join),
        ("rendezvous", join, joined),
        ("worker_init", joined, ready),
        ("checkpoint_load", ready, loaded),
        ("first_step", loaded, first_step),
        ("total", fault_time, first_step),
    ]
    return {name: (end - start if start is not None and end is not None else None) for name, start, end in stages}


def checkpoint_progress(events: list[dict], fault_time: float) -> tuple[list[int], int, list[int]]:
    """(checkpoints saved before the group restarted, oldest first; the last step reached
    before then; the steps rank 0 loaded after the fault). The group's end, not the fault's
    injection, divides them (events.restarted_at)."""
    before = [e for e in events if e["time"] < faulted_run_end(events, fault_time)]
    saved = sorted(e["step"] for e in before if e["event"] == Event.CHECKPOINT_SAVED)
    reached = max((e["step"] for e in before if e["event"] == Event.STEP), default=0)
    loaded = [
        e["step"] for e in events if e["time"] > fault_time and e["event"] == Event.CHECKPOINT_LOADED and e["rank"] == 0
    ]
    return saved, reached, loaded


def judge_restart_resume(report, seen, fault_time: float, ckpt_every: int, in_flight: bool = False) -> None:
    """A fault the worker group restarts from, judged: the job succeeded after one restart,
    resumed from the newest checkpoint saved before the fault, lost at most one checkpoint
    interval, and ended bit-identical to the fault-free reference. in_flight: the job saved
    asynchronously (a step is committed at the next save), so the newest step begun was in flight
    at the fault: it must not be the one loaded, and up to two intervals may be lost."""
    events, codes = seen.events, seen.codes
    saved, reached, loaded = checkpoint_progress(events, fault_time)
    report.facts["restarts"] = restarts(events)
    report.facts["lost_steps"] = reached - loaded[0] if loaded else None
    report.facts["recovery"] = recovery_breakdown(events, seen.agents, fault_time)
    report.check("the job succeeded", all(c == 0 for c in codes.values()), f"exit codes {codes}")
    report.check(
        "the worker group restarted once", report.facts["restarts"] == 1, f"restart count {report.facts['restarts']}"
    )
    report.check(
        "resumed from the newest checkpoint",
        bool(loaded) and bool(saved) and loaded[0] == max(saved),
        f"newest before the fault: {max(saved, default=None)}, loaded: {loaded[:1]}",
    )
    if in_flight:
        check_in_flight(report, saved, reached, loaded, ckpt_every)
    lost, bound = report.facts["lost_steps"], ckpt_every * (2 if in_flight else 1)
    report.check(
        f"lost at most {'two checkpoint intervals' if in_flight else 'one checkpoint interval'} ({bound} steps)",
        lost is not None and 0 <= lost <= bound,
        f"lost {lost} steps",
    )
    judge_reference(report, seen)


def check_in_flight(report, saved: list[int], reached: int, loaded: list[int], ckpt_every: int) -> None:
    """The newest step whose save had begun at the fault was in flight (not committed) and was
    not loaded: the resume took an older, committed step."""
    begun = reached // ckpt_every * ckpt_every
    report.facts["save_in_flight"] = begun
    committed = "committed" if begun in saved else "not committed"
    if not report.check(
        "the step in flight at the fault was not loaded",
        bool(loaded) and begun > 0 and begun not in saved and loaded[0] < begun,
        f"step {begun}'s save had begun ({committed} before the fault); loaded: {loaded[:1]}",
    ):
        report.explanation = (
            "a careful job commits a step only once every rank's files are whole (DCP's .metadata, then a "
            "rename or a marker), loads only committed steps, and a fault past the first save finds one in flight"
        )


def world_sizes_in_turn(events: list[dict]) -> list[int]:
    """The world sizes the job's groups formed with, in the order they formed (each once in a row)."""
    sizes: list[int] = []
    for e in sorted(events, key=lambda e: e["time"]):
        if e["event"] == Event.RENDEZVOUS_DONE and (not sizes or sizes[-1] != e["world_size"]):
            sizes.append(e["world_size"])
    return sizes


def check_resized(report, shape, after: list[dict], rejoined: bool) -> None:
    """An elastic job that lost one node (shape: its full size; after: the events after the kill):
    it went on with the ranks it had, or, once the node rejoined, grew back to all of them. Judged
    alike on the lab's trainer (kill-node) and on a user's script (lab.exercises.script.resize)."""
    fewer = shape.world_size - shape.nproc_per_node
    if rejoined:
        grew = world_sizes_in_turn(after)
        report.check(
            f"it shrank to {fewer} ranks, then grew back to {shape.world_size} when the node rejoined",
            grew == [fewer, shape.world_size],
            f"world sizes after the kill, in turn: {grew}",
        )
    else:
        worlds = sorted({e["world_size"] for e in after if e["event"] == Event.RENDEZVOUS_DONE})
        report.check("the job carried on with fewer ranks", worlds == [fewer], f"world size after the kill: {worlds}")


def restarts(events: list[dict]) -> int:
    return max((e["restart"] for e in events), default=0)


def final_checksums(events: list[dict]) -> set[str]:
    return {e["checksum"] for e in events if e["event"] == Event.EXIT and e.get("reason") == ExitReason.COMPLETED}


def check_final_weights(report, final: set[str], reference: set[str], source: str | None) -> bool:
    match = len(final) == 1 and final == reference
    report.facts["final_weights_match_reference"] = match
    report.facts["reference"] = source
    return report.check(
        "final weights bit-identical to an uninterrupted run", match, f"{sorted(final)} vs {sorted(reference)}"
    )


def judge_reference(report, seen) -> bool:
    """check_final_weights on what a drill saw (lab.exercises.seen.Seen), and the exactly-once
    ledger of its samples where the ranks recorded them (lab.exercises.samples)."""
    samples.check(report, seen.events)
    return check_final_weights(report, final_checksums(seen.events), set(seen.reference or ()), seen.reference_source)
