"""The diagnosis bench's score table: per fault class and overall, the goals, and every miss."""

from __future__ import annotations

from collections.abc import Sequence

from lab.bench.grading import Fault, Grade
from lab.bench.result import goal_line

GOAL_RIGHT, GOAL_MINUTES = 0.95, 15.0


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
