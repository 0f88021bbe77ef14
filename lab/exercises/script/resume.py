"""Did a user's script resume where it left off after a fault: from its newest checkpoint, and every rank together."""

from __future__ import annotations

from typing import Any

from lab.exercises.script import signals
from lab.health.events import Event, faulted_run_end
from lab.report import Report


def check_together(report: Report, resumed: dict[int, int], unit: str, extra: dict) -> None:
    """Every rank that prints its progress resumed at the same one. Ranks that did not were
    not started from the same checkpoint: some found none (a node that cannot see the files
    rank 0 wrote), and DDP then pairs up collectives of different steps. Checked only where
    they disagree: the check that rank 0 resumed stands for the rest."""
    if len(set(resumed.values())) < 2:
        return
    where: dict[int, list[int]] = {}
    for rank, value in resumed.items():
        where.setdefault(value, []).append(rank)
    said = "; ".join(
        f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} at {unit} {value}"
        for value, ranks in sorted(where.items())
    )
    note = f" ({extra['workdir_note']})" if extra.get("workdir_note") else ""
    report.check("every rank resumed at the same step", False, f"the ranks resumed apart: {said}{note}")


def newest_save(events: list[dict], fault_time: float, source: str, unit: str) -> dict | None:
    """When the script last saved (torch.save, dcp.save) before the fault, and rank 0's progress
    then: where a resume from its newest checkpoint should pick up. None: it saved nothing seen.
    A save after the injection and before the restart counts (events.restarted_at)."""
    until = faulted_run_end(events, fault_time)
    times = [e["time"] for e in events if e["event"] == Event.SAVED and e["time"] < until]
    if not times:
        return None
    steps = [e["step"] for e in signals.progress(events, source, unit) if e["time"] <= max(times)]
    return {"unit": unit, "at": max(steps, default=None)}


def first_save_after(events: list[dict], fault_time: float, source: str, unit: str) -> dict | None:
    """The script's first save after the fault, and its progress then (the latest step before
    it): where a fault would have had a checkpoint to come back to. None: no save after either.
    "at" is None unless its progress went past that step afterwards (a step a fault can wait for)."""
    times = sorted(e["time"] for e in events if e["event"] == Event.SAVED and e["time"] >= fault_time)
    if not times:
        return None
    mine = signals.progress(events, source, unit)
    before = [e["step"] for e in mine if e["time"] <= times[0]]
    at = before[-1] if before else None
    went_on = at is not None and any(e["step"] > at for e in mine if e["time"] > times[0])
    return {"unit": unit, "at": at if went_on else None}


def check_resumed(
    report: Report, seg: dict[str, Any], unit: str, loaded: list[str], saved: dict | None, later: dict | None = None
) -> None:
    """Resumed: it went on past where it started, or it loaded a checkpoint and picked up where
    its newest one (saved before the fault) left off, however sparse its snapshots. `later`: its
    first save after the fault (first_save_after), which says how late a fault must come."""
    report.facts["progress"].update(seg)
    report.facts["newest_checkpoint_before_fault"] = saved
    first, reached, resumed = seg["first"], seg["reached"], seg["resumed_at"]
    redone = max(0, reached - resumed + 1) if reached is not None and resumed is not None else None
    report.facts["work_redone"] = (
        {"unit": unit, "count": redone, "from": resumed, "to": reached} if redone is not None else None
    )
    at_save = saved["at"] if saved else None
    from_newest = bool(loaded) and saved is not None and resumed is not None and (at_save is None or resumed >= at_save)
    resumed_ok = resumed is not None and first is not None and (resumed > first or from_newest)
    if resumed is None:
        detail = f"no {unit} after the workers started again"
    elif resumed_ok:
        detail = f"{unit} {reached} reached before the fault, resumed at {unit} {resumed}: {redone} {unit}(s) redone"
        detail += f"; loaded {loaded[0]}" if loaded else ""
        if not resumed > first:  # a sparse snapshot: right to start over from it
            where = f"at {unit} {at_save}" if at_save is not None else f"before its first {unit}"
            detail += f", its newest checkpoint before the fault (saved {where})"
    elif loaded and at_save is not None:
        detail = f"loaded {loaded[0]} but resumed at {unit} {resumed}, before {unit} {at_save} where it last saved"
    elif loaded:
        detail = (
            f"restarted from {unit} {resumed} although it loaded {loaded[0]}: no torch.save or dcp.save was seen "
            "before the fault, so nothing says that file held any progress"
        )
    elif saved is None:  # nothing seen saved, nothing loaded: too early to tell, or no checkpointing
        detail = (
            f"restarted from {unit} {resumed} and loaded no file; no torch.save or dcp.save was seen before the "
            "fault either: it came before the first checkpoint (fire later: --at-step, --at-time), or your "
            "script does not checkpoint"
        )
        if later and later["at"] is not None:  # the evidence says which
            detail += (
                f"; it first saved after the fault, at {unit} {later['at']}: --at-step {later['at'] + 1} comes after it"
            )
    else:  # it saved, and no load was seen: say what was seen, and what else could explain it
        where = f" at {unit} {at_save}" if at_save is not None else ""
        detail = (
            f"restarted from {unit} {resumed} and no load was seen after the fault, though it saved a checkpoint"
            f"{where} before it: either it does not load its checkpoint on start, or it loads through a file "
            f"object or fsspec (not seen) and its progress is printed in words the lab did not read "
            "(--progress-regex says how it prints it)"
        )
    report.check("it resumed where it left off, not from the start", resumed_ok, detail)
