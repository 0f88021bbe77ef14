"""The ledger of a chaos campaign: where the wall time went, and what the faults cost.

Wall time from the job's first step to its last (or the campaign's stop), split into
recovery (per kind: from each fault until every rank was two steps past the front it struck
at), stalls (the same span, for a fault the job rides out slower: a slow rank), checkpoint
saves (rank 0's own measure) and the rest, productive steps. The measured
ETTR (effective training time ratio) is productive over wall: what `lab bench goodput`
projects, measured. Work redone: steps a rank did more than once.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from lab import job_text
from lab.chaos.campaign import Blow
from lab.chaos.progress import Progress
from lab.chaos.schedule import KINDS


def ledger(
    blows: list[Blow], progress: Progress, weights: dict[str, Any], setup: dict[str, Any], until: float | None = None
) -> dict[str, Any]:
    """until: when the schedule was over (the job's finish after it is the campaign's, not the job's)."""
    times = [t for t, _, _ in progress.steps if until is None or t <= until]
    wall = (max(times) - min(times)) if times else 0.0
    landed = [b for b in blows if b.time is not None]
    recovery: dict[str, float] = defaultdict(float)
    stalled: dict[str, float] = defaultdict(float)
    for blow in landed:
        spent = stalled if KINDS[blow.kind].stalls else recovery
        spent[blow.kind] += blow.recovered_s if blow.recovered_s is not None else blow.bound_s
    saving = sum(seconds for when, _, seconds in progress.saves if until is None or when <= until)
    productive = max(0.0, wall - sum(recovery.values()) - sum(stalled.values()) - saving)
    inside = [b for b in landed if KINDS[b.kind].in_recovery]
    return {
        **setup,
        "faults_planned": len(blows),
        "faults_injected": len(landed),
        "faults_inside_a_recovery": len(inside),
        "findings": [b.to_json() for b in blows if b.finding],
        "stuck": sum(1 for b in landed if b.finding.startswith("not back")),
        "wall_s": round(wall, 3),
        "recovery_s": {k: round(v, 3) for k, v in sorted(recovery.items())},
        "stalled_s": {k: round(v, 3) for k, v in sorted(stalled.items())},
        "checkpoint_s": round(saving, 3),
        "productive_s": round(productive, 3),
        "ettr": round(productive / wall, 4) if wall else None,
        "steps_redone": progress.steps_redone(),
        "final_weights": weights,
        "faults": [b.to_json() for b in blows],
    }


def markdown(record: dict[str, Any]) -> str:
    weights = record["final_weights"]
    lines = [
        f"# Chaos campaign: seed {record['seed']}, {record['faults_injected']} of {record['faults_planned']} "
        f"faults ({record['faults_inside_a_recovery']} inside a recovery), {record['recovery_style']} recovery",
        "",
        f"- wall {record['wall_s']:.1f} s: productive {record['productive_s']:.1f} s, checkpoints "
        f"{record['checkpoint_s']:.1f} s, recovery {sum(record['recovery_s'].values()):.1f} s"
        + (f", stalls {sum(record['stalled_s'].values()):.1f} s" if record.get("stalled_s") else ""),
        f"- measured ETTR: {_ratio(record['ettr'])}; steps redone: {record['steps_redone']}",
        f"- stuck recoveries: {record['stuck']}; {_final(weights)}",
        f"- load beside the job: {record['load']} busy process(es)",
        *([f"- data, every sample once per epoch: {record['samples']['why']}"] if record.get("samples") else []),
        "",
        "| # | fault | ranks | at step | back in s | bound s | finding |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, blow in enumerate(record["faults"], 1):
        back = "" if blow["recovered_s"] is None else f"{blow['recovered_s']:.2f}"
        ranks = ",".join(map(str, blow["ranks"])) if blow["time"] is not None else "not injected"
        cells = [str(i), blow["kind"], ranks, str(blow["front"]), back, f"{blow['bound_s']:.0f}", blow["finding"]]
        lines.append("| " + " | ".join(job_text.markdown_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _final(weights: dict[str, Any]) -> str:
    """The final weights (the trainer's) or result (a script's --compare file) against an uninterrupted run."""
    if weights.get("reference_ended") is False:
        return f"final result {weights['why']}"
    if weights.get("compared"):
        verdict = "as" if weights["identical"] else "differs from"
        return f"final {weights['compared']} {verdict} an uninterrupted run's ({weights.get('how') or weights['why']})"
    if weights.get("identical") is None:
        return f"final result {weights.get('why')}"
    return "final weights " + (
        "bit-identical to an uninterrupted run" if weights["identical"] else f"differ: {weights.get('why')}"
    )


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
