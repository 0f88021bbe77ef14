"""`lab bench diagnosis`: `lab why` graded against faults injected at known ranks and steps.

    lab bench diagnosis [--classes kill,exception,...] [--positions first,middle,last]
                        [--at-steps 6,10,14] [--targets trainer,script] [--hosts loopback|netns]
                        [--side-by-side 2] [--keep DIR]

Each cell is one 2 x 2 job with no restart budget (lab.bench.diagnosis_cell): the lab's
trainer, or an ordinary DDP script with no lab import (lab/workloads/plain_train.py, watched
through lab.node.user_script), broken by one signal to one rank after a given step. The card
`lab why` prints for its run dir (lab.why.card) is graded by lab.bench.grading: the rank it names, the
class of fault, the step. The score table counts right cells, "unknown" answers and
wrong ranks named with confidence, per fault class and overall.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lab.bench.diagnosis_cell import NODES, NPROC, STEPS, Cell, run_cell
from lab.bench.diagnosis_table import analyzer_table, table
from lab.bench.grading import FAULT_NAMES, FAULTS, Fault, Grade
from lab.bench.result import BenchResult, this_command
from lab.bench.side_by_side import run_in_temp
from lab.errors import LabError
from lab.options import Option
from lab.runtimes.local import HOSTS

POSITIONS = {"first": 0, "middle": NODES * NPROC // 2, "last": NODES * NPROC - 1}
TARGETS = ("trainer", "script")
HOST_KINDS = ("loopback", "netns")  # where its cells were measured: the rank's pid is the host's (cgroups, kmsg)
BENCH_HOSTS = HOSTS.but(
    default="loopback", help="where the cells' nodes run: loopback (default) or netns hosts (root, iproute2)"
)


def listed(name: str, choices: Sequence[str]):
    def parse(text: str) -> list[str]:
        chosen = [c.strip() for c in text.split(",") if c.strip()]
        unknown = [c for c in chosen if c not in choices]
        if unknown or not chosen:
            raise ValueError(f"{name}: choose from {', '.join(choices)}; got {text!r}")
        return chosen

    return parse


def steps_list(text: str) -> list[int]:
    words = [s.strip() for s in text.split(",") if s.strip()]
    steps = [int(s) for s in words if s.isdigit()]
    if not steps or len(steps) < len(words) or any(s < 1 or s >= STEPS // 2 for s in steps):
        raise ValueError(f"--at-steps: steps from 1 to {STEPS // 2 - 1}; got {text!r}")
    return steps


CLASSES = Option("--classes", "fault classes to inject, comma-separated (default: all)", ",".join(FAULT_NAMES))
POSITIONS_OPTION = Option("--positions", "ranks hit: first, middle, last (default: all)", ",".join(POSITIONS))
AT_STEPS = Option(
    "--at-steps",
    "steps the fault fires after, taken in turn by the positions (first at the first step, middle at the "
    "next, ...): every position and every step in a third of the cells a full cross would take "
    "(default %(default)s)",
    "6,10,14",
)
TARGETS_OPTION = Option("--targets", "what the ranks run: trainer, script (default: both)", ",".join(TARGETS))
SIDE_BY_SIDE = Option("--side-by-side", "cells run side by side, each its own lab (default %(default)s)", 2, int)
KEEP = Option(
    "--keep", "keep each cell's evidence (lab.why.evidence: what its card was drawn from) under this folder", ""
)


def add_arguments(p) -> None:
    BENCH_HOSTS.add_to(p)
    for option in (CLASSES, POSITIONS_OPTION, AT_STEPS, TARGETS_OPTION, SIDE_BY_SIDE, KEEP):
        option.add_to(p)


def paired(positions: list[str], steps: list[int]) -> list[tuple[str, int]]:
    """Each position with the next step in turn; more steps than positions: the positions again."""
    return [(positions[i % len(positions)], steps[i % len(steps)]) for i in range(max(len(positions), len(steps)))]


def refusal(cell: Cell, hosts: str) -> str:
    """Why the cell cannot be made ("": it can)."""
    if cell.target == "script" and cell.fault.no_script:
        return cell.fault.no_script
    if cell.fault.needs_hosts and hosts != cell.fault.needs_hosts:
        return f"it needs {cell.fault.needs_hosts} hosts (--hosts {cell.fault.needs_hosts}); these are {hosts}"
    return ""


def refuses(cell: Cell, hosts: str = "netns") -> bool:
    return bool(refusal(cell, hosts))


def hit(target: str, fault: Fault, rank: int) -> int:
    """The rank a cell's fault goes to: its position's, or for a fault in the trainer's checkpoint
    writes, rank 0, its one writer (the cells' nodes share the run dir's checkpoints folder)."""
    return 0 if fault.writer_only and target == "trainer" else rank


def run(args, out_dir: Path) -> BenchResult:
    try:
        faults = [f for f in FAULTS if f.name in listed("--classes", FAULT_NAMES)(args.classes)]
        positions = listed("--positions", tuple(POSITIONS))(args.positions)
        targets = listed("--targets", TARGETS)(args.targets)
        steps = steps_list(args.at_steps)
    except ValueError as e:
        raise LabError(str(e)) from None
    if args.hosts not in HOST_KINDS:
        raise LabError(f"--hosts: the diagnosis bench runs on {' or '.join(HOST_KINDS)} hosts; got {args.hosts}")
    if args.side_by_side < 1:
        raise LabError(f"--side-by-side: at least 1 cell at a time; got {args.side_by_side}")
    places = paired(positions, steps)
    cells = [Cell(t, f, hit(t, f, POSITIONS[p]), step) for t in targets for f in faults for p, step in places]
    refused = sorted({(c.target, c.fault.name, refusal(c, args.hosts)) for c in cells if refuses(c, args.hosts)})
    for target, fault, why in refused:
        print(f"{fault} on the {target}: refused: {why}", flush=True)
    cells = [c for c in cells if not refuses(c, args.hosts)]
    graded, minutes = run_in_temp(
        "diagnosis",
        cells,
        args.side_by_side,
        lambda cell, tmp, stop: run_cell(cell, args.hosts, tmp, args.keep, stop),
        lambda n, of, result: say(n, of, result[0]),
    )
    grades = [g for g, _ in graded]
    return BenchResult(
        name="diagnosis",
        command=this_command(),
        markdown=table(grades, faults, args.hosts, minutes, args.side_by_side, refused) + analyzer_table(graded),
        figures={"cells": [{**g.to_json(), **extra} for g, extra in graded], "minutes": round(minutes, 1)},
    )


def say(n: int, of: int, result: Grade) -> None:
    mark = "right" if result.right else "WRONG RANK" if result.wrong_rank else "missed"
    print(
        f"[{n}/{of}] {result.target} {result.fault} rank {result.rank} step {result.step}: {mark} "
        f"(named {f'ranks {list(result.named_ranks)}' if result.named_ranks else f'rank {result.named_rank}'}, "
        f"{result.named_kind}, step {result.named_step})",
        flush=True,
    )
