"""The diagnosis bench's score table: per fault class and overall, the goals, and every miss."""

from __future__ import annotations

import re
from collections.abc import Sequence

from lab.bench.grading import Fault, Grade
from lab.bench.result import goal_line

GOAL_RIGHT, GOAL_MINUTES = 0.95, 15.0
RANK_SET = re.compile(r"\{[\d, ]+\}")  # the ranks in an analyzer's answer: {1} or {2, 3}


def row(label: str, grades: list[Grade]) -> str:
    n = len(grades)

    def count(ok: str) -> int:
        return sum(1 for g in grades if getattr(g, ok))

    unknown = sum(1 for g in grades if g.unknown)
    right = count("right")
    return (
        f"| {label} | {n} | {count('rank_ok')} | {count('kind_ok')} | {count('step_ok')} | {unknown} | "
        f"{count('wrong_rank')} | {right / n:.0%} |"
    )


def table(
    grades: list[Grade],
    faults: list[Fault],
    hosts: str,
    minutes: float,
    parallel: int = 1,
    refused: Sequence[tuple[str, str, str]] = (),
) -> list[str]:
    """refused: (target, fault, why) for the cells the bench could not inject."""
    lines = [
        f"`lab why` graded on {len(grades)} cells ({hosts} hosts, 2 x 2, no restarts; the lab's trainer and an "
        "ordinary DDP script, lab/workloads/plain_train.py): right = the first-failing rank (a straggler's: the "
        "slowed one) and the fault's class both named (where the evidence cannot settle the rank: no rank named with "
        "confidence, and the class); unknown = no rank named with confidence; wrong = another rank named with "
        "confidence.",
        "",
        "| fault (what was injected) | cells | right rank | right class | right step | unknown | wrong rank | right |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for fault in faults:
        mine = [g for g in grades if g.fault == fault.name]
        if mine:
            lines.append(row(f"{fault.name} ({fault.what}; expect: {fault.expect})", mine))
    if grades:
        lines.append(row("**all**", grades))
    right = sum(1 for g in grades if g.right) / max(1, len(grades))
    wrong = sum(1 for g in grades if g.wrong_rank)
    lines += [
        "",
        goal_line(f">= {GOAL_RIGHT:.0%} of cells right", right >= GOAL_RIGHT, f"{right:.1%}"),
        goal_line("0 cells with a wrong rank named", wrong == 0, str(wrong)),
        goal_line(
            f"the matrix in under {GOAL_MINUTES:g} minutes",
            minutes < GOAL_MINUTES,
            f"{minutes:.1f} min, {parallel} cell{'s' if parallel > 1 else ''} at a time",
        ),
    ]
    if refused:
        lines += ["", "Cells not run:", ""]
        lines += [f"- {fault} on the {target}: {why}" for target, fault, why in refused]
    misses = [g for g in grades if not (g.right and g.step_ok)]
    if misses:
        lines += ["", "Cells not fully right (injected -> named):", ""]
        lines += [
            f"- {g.target}, {g.fault} at rank {g.rank} after step {g.step} -> "
            f"{f'ranks {list(g.named_ranks)}' if g.named_ranks else f'rank {g.named_rank}'}, "
            f"{g.named_kind}, step {g.named_step}"
            for g in misses
        ]
    return lines


def analyzer_table(cells: list[tuple[Grade, dict]]) -> list[str]:
    """The hang cells again, torch's Flight Recorder analyzer beside the card (lab.bench.flight_recorder)."""
    hangs = [(g, extra["flight_recorder"]) for g, extra in cells if "flight_recorder" in extra]
    if not hangs:
        return []
    lines = [
        "",
        "The same hang cells, torch's own analyzer beside the card (`python -m torch.distributed.flight_recorder."
        "fr_trace --allow-incomplete-ranks` on every rank's raw dump, asked for 2 s after the fault; as shipped it "
        "raises KeyError ('0', 0) on every gloo dump of torch 2.13, so lab.bench.fr_trace_gloo first names each "
        "dump's group as its entries do). Graded the same way; it names no class, so a rank it names counts as "
        "hung, and a rank that left no dump (stopped, or holding the GIL) is one it cannot decide on:",
        "",
        "| fault | cells | card right | analyzer right | analyzer unknown | analyzer wrong rank | analyzer failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for fault in sorted({g.fault for g, _ in hangs}):
        mine = [(g, fr) for g, fr in hangs if g.fault == fault]
        lines.append(
            f"| {fault} | {len(mine)} | {sum(g.right for g, _ in mine)} | {sum(fr['right'] for _, fr in mine)} | "
            f"{sum(fr['unknown'] and not fr['failed'] for _, fr in mine)} | {sum(fr['wrong_rank'] for _, fr in mine)} "
            f"| {sum(fr['failed'] for _, fr in mine)} |"
        )
    behind = [g for g, fr in hangs if fr["right"] and not g.right]
    lines += [
        "",
        goal_line("the card at least as right as the analyzer on every hang cell", not behind, str(len(behind))),
    ]
    answers: dict[tuple[str, str], list[int]] = {}
    for g, fr in hangs:
        answers.setdefault((g.fault, RANK_SET.sub("{N}", fr["said"])), []).append(g.rank)
    lines += ["", "What the analyzer said, once per kind of answer ({N}: the ranks it named):", ""]
    lines += [
        f"- {fault}, cells of rank {', '.join(map(str, sorted(set(ranks))))}: {said}"
        for (fault, said), ranks in sorted(answers.items())
    ]
    return lines
