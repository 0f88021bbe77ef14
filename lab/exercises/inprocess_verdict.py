"""The verdict on a fault survived in-process (lab.inprocess): the lost rank replaced by a spare,
the others never stopped, state from a peer, at most the step in flight redone, the weights of
an uninterrupted run. What a drill whose fault in-process recovery survives judges with, in
place of observe.judge_restart_resume."""

from __future__ import annotations

from lab.exercises import observe
from lab.health.events import AgentEvent, Event


def breakdown(events: list[dict], fault_time: float) -> dict:
    """Seconds from the fault: detect (a survivor's collective failed), regroup (the new
    generation's group formed), state_from_peer (the handover), first_step, total."""
    failed = observe.first_time(events, fault_time, lambda e: e["event"] == Event.COLLECTIVE_FAILED)
    regrouped = observe.first_time(events, failed or fault_time, lambda e: e["event"] == Event.RENDEZVOUS_DONE)
    adopted = observe.first_time(events, regrouped or fault_time, lambda e: e["event"] == Event.STATE_FROM_PEER)
    first = observe.first_time(events, adopted or fault_time, lambda e: e["event"] == Event.STEP)
    spans = [("detect", fault_time, failed), ("regroup", failed, regrouped), ("state_from_peer", regrouped, adopted)]
    spans += [("first_step", adopted, first), ("total", fault_time, first)]
    return seconds(spans)


def seconds(spans: list[tuple[str, float | None, float | None]]) -> dict:
    """Each named span's length (None where an end was never seen)."""
    return {name: (end - start if start is not None and end is not None else None) for name, start, end in spans}


def steps_redone(events: list[dict], fault_time: float) -> int | None:
    """Steps some rank had completed before the fault that the regrouped job did again (None:
    it never took state from a peer)."""
    handed = [e["step"] for e in events if e["event"] == Event.STATE_FROM_PEER and e["time"] > fault_time]
    if not handed:
        return None
    reached = max((e["step"] for e in events if e["event"] == Event.STEP and e["time"] < fault_time), default=0)
    return max(0, reached - min(handed))


def stranded_ranks(agents: list[dict], fault_time: float) -> set[int]:
    """Ranks that left a collective gloo had stranded after the fault (lab.inprocess.lookout),
    as their keepers recorded them: replaced by a spare as well, though nothing killed them."""
    recorded = [a for a in agents if a["name"] == AgentEvent.RANK_STRANDED and a["time"] > fault_time]
    ranks = {a["event"].get("metadata", {}).get("rank") for a in recorded}
    return {rank for rank in ranks if isinstance(rank, int)}


def judge(report, seen, fault_time: float, target_rank: int) -> None:
    """kill-worker (or any fault that ends one rank's process) under --recovery in-process."""
    events, codes = seen.events, seen.codes
    after = [e for e in events if e["time"] > fault_time]
    started = {e["rank"] for e in after if e["event"] == Event.START}
    stranded = stranded_ranks(seen.agents, fault_time)
    report.facts["replacements"] = observe.restarts(events)  # the generation: one per replaced rank
    report.facts["stranded"] = sorted(stranded)
    report.facts["lost_steps"] = steps_redone(events, fault_time)
    report.facts["recovery"] = breakdown(events, fault_time)
    report.check("the job succeeded", all(c == 0 for c in codes.values()), f"exit codes {codes}")
    also = f" (and, stranded by gloo, rank(s) {sorted(stranded)}: lab.inprocess.lookout)" if stranded else ""
    report.check(
        f"rank {target_rank}'s place went to a warm spare, the other ranks stayed{also}",
        started == {target_rank} | stranded,
        f"ranks started after the fault: {sorted(started)}",
    )
    sources = {e["source"] for e in after if e["event"] == Event.STATE_FROM_PEER}
    report.check(
        "every rank took its state from a surviving peer, no checkpoint read",
        len(sources) == 1
        and target_rank not in sources
        and not any(e["event"] == Event.CHECKPOINT_LOADED for e in after),
        f"sources {sorted(sources)}",
    )
    lost = report.facts["lost_steps"]
    report.check("lost at most the step in flight", lost is not None and lost <= 1, f"redid {lost} steps")
    observe.judge_reference(report, seen)


def fallback_facts(seen, fault_time: float) -> dict:
    """In-process recovery's fallback after a hang it cannot end (lab.node.inprocess.rounds): why,
    when each node's keeper restarted its ranks, the steps redone, and what it cost in seconds
    from the fault: detect (the round), restart (the group re-formed), first_step, total."""
    rounds = [a for a in seen.agents if a["name"] == AgentEvent.GROUP_RESTARTED and a["time"] > fault_time]
    after = [e for e in seen.events if e["time"] > fault_time]
    loaded = {e["rank"]: e["step"] for e in after if e["event"] == Event.CHECKPOINT_LOADED}
    reached = max((e["step"] for e in seen.events if e["event"] == Event.STEP and e["time"] < fault_time), default=0)
    asked = rounds[0]["time"] if rounds else None
    regrouped = observe.first_time(after, asked or fault_time, lambda e: e["event"] == Event.RENDEZVOUS_DONE)
    first = observe.first_time(after, asked or fault_time, lambda e: e["event"] == Event.STEP)
    spans = [("detect", fault_time, asked), ("restart", asked, regrouped), ("first_step", regrouped, first)]
    spans.append(("total", fault_time, first))
    return {
        "to": "restart",
        "why": rounds[0]["event"].get("metadata", {}).get("why") if rounds else None,
        "nodes": sorted({a["node"] for a in rounds}),
        "rounds": sorted({a["event"].get("metadata", {}).get("round") for a in rounds}),
        "resumed_from": sorted(set(loaded.values())),
        "loaded_by": sorted(loaded),
        "lost_steps": reached - min(loaded.values()) if loaded else None,
        "seconds": seconds(spans),
    }


def judge_fallback(report, seen, fault_time: float) -> dict:
    """A fault under --recovery in-process that no spare can take over (a rank hung in Python,
    a node lost whole): every node's keeper restarted every rank from the checkpoint, in one
    round (lab.node.inprocess.fallback). The drill checks what led there first. Returns the facts."""
    fell = report.facts["fell_back"] = fallback_facts(seen, fault_time)
    report.facts["recovery"] = fell["seconds"]
    report.check(
        "every node's keeper fell back to one restart of the whole group",
        len(fell["nodes"]) == seen.topology.nodes and len(fell["rounds"]) == 1,
        f"nodes {fell['nodes']}, rounds {fell['rounds']}: {fell['why']}",
    )
    report.check(
        "every rank started afresh and resumed from the same checkpoint",
        set(fell["loaded_by"]) == set(range(seen.topology.world_size)) and len(fell["resumed_from"]) == 1,
        f"loaded by ranks {fell['loaded_by']}, steps {fell['resumed_from']}; redid {fell['lost_steps']} steps",
    )
    report.check("the job succeeded", all(c == 0 for c in seen.codes.values()), f"exit codes {seen.codes}")
    observe.judge_reference(report, seen)
    return fell


def steps_text(fell: dict) -> str:
    return ", ".join(map(str, fell["resumed_from"])) or "(none)"


def cost_text(fell: dict) -> str:
    total = fell["seconds"]["total"]
    return f"{total:.1f} s" if total is not None else "an unknown time"
