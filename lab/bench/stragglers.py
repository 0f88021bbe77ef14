"""`lab bench stragglers`: how soon lab.health.stragglers names a slowed rank, and how often a clean run.

    lab bench stragglers [--ways sleep,cpu-quota,netem,slow-link] [--positions first,middle,last]
                         [--at-steps 20]
                         [--clean-runs 5] [--clean-steps 200] [--hosts loopback|netns] [--side-by-side 2]

Each cell is a 2 x 2 run of the lab's trainer (lab.bench.straggler_cell): one rank slowed one
way after a given step, or nothing done (a clean run). The table counts, per way, the cells
whose slowed rank was named within 20 steps, the steps it took, and the false alarms of the
clean runs, which run beside the slowed ones (--side-by-side): on a loaded machine, as they would.
A network delay (netem) and a slow link (a bandwidth cap, tbf) need netns hosts, whose
links are their own, and a kernel with that queueing discipline: they are default ways
where both hold, and refused in one line elsewhere.
"""

from __future__ import annotations

from pathlib import Path

from lab.bench.diagnosis import (
    AT_STEPS,
    BENCH_HOSTS,
    HOST_KINDS,
    POSITIONS,
    POSITIONS_OPTION,
    SIDE_BY_SIDE,
    listed,
    paired,
    steps_list,
)
from lab.bench.result import BenchResult, goal_line, this_command
from lab.bench.side_by_side import run_in_temp
from lab.bench.straggler_cell import (
    AFTER,
    CLEAN_STEPS,
    GOAL_STEPS,
    NETWORK_WAYS,
    STEP_TIME,
    WAYS,
    Cell,
    Outcome,
    run_cell,
)
from lab.errors import LabError
from lab.health.stragglers import MARGIN_S, NET_MARGIN_S, NET_WINDOW, RATIO, WINDOW, SlowNetwork
from lab.options import Option
from lab.runtimes.local_faults import kernel_has

WAYS_OPTION = Option(
    "--ways", f"how the rank is slowed, comma-separated: {', '.join(WAYS)} (default: all the hosts can take)", ""
)
CLEAN_RUNS = Option("--clean-runs", "runs with nothing slowed, for false alarms (default %(default)s)", 5, int)
CLEAN_STEPS_OPTION = Option("--clean-steps", "steps of each clean run (default %(default)s)", CLEAN_STEPS, int)
SLOWED_AT = AT_STEPS.but(
    default="20",
    help="steps after which a rank is slowed, taken in turn by the positions (default %(default)s)",
)


def add_arguments(p) -> None:
    BENCH_HOSTS.add_to(p)
    for option in (WAYS_OPTION, POSITIONS_OPTION, SLOWED_AT, CLEAN_RUNS, CLEAN_STEPS_OPTION, SIDE_BY_SIDE):
        option.add_to(p)


def cells_of(args) -> tuple[list[Cell], list[str]]:
    """The cells, and what this machine could not measure (a way its kernel cannot inject)."""
    if args.hosts not in HOST_KINDS:
        raise LabError(f"--hosts: the stragglers bench runs on {' or '.join(HOST_KINDS)} hosts; got {args.hosts}")
    missing = {w: q for w, q in NETWORK_WAYS.items() if args.hosts == "netns" and not kernel_has(q)}
    local = [w for w in WAYS if w not in missing and (args.hosts == "netns" or w not in NETWORK_WAYS)]
    try:
        ways = listed("--ways", tuple(WAYS))(args.ways or ",".join(local))
        positions = listed("--positions", tuple(POSITIONS))(args.positions)
        steps = steps_list(args.at_steps)
    except ValueError as e:
        raise LabError(str(e)) from None
    if args.clean_runs < 0:
        raise LabError(f"--clean-runs: 0 or more; got {args.clean_runs}")
    if args.clean_steps < AFTER:
        raise LabError(f"--clean-steps: at least {AFTER} (a finding needs its window); got {args.clean_steps}")
    if args.side_by_side < 1:
        raise LabError(f"--side-by-side: at least 1 cell at a time; got {args.side_by_side}")
    lacking = [w for w in ways if w in missing]
    if lacking:
        raise LabError(
            f"--ways {','.join(lacking)}: this kernel has no {', '.join(missing[w] for w in lacking)} queueing "
            f"discipline; choose from {', '.join(local)}"
        )
    network = [w for w in ways if w not in local]
    if network:
        raise LabError(
            f"--ways {','.join(network)}: a network fault needs netns hosts, whose links are their own "
            "(loopback hosts share one network stack): add --hosts netns"
        )
    slowed = [Cell(way, POSITIONS[p], step) for way in ways for p, step in paired(positions, steps)]
    clean = [Cell("clean", None, 0, run, args.clean_steps) for run in range(args.clean_runs)]
    # A clean run beside each slowed one, not all at the end: the false alarms on a busy machine.
    mixed = [c for pair in zip(slowed, clean, strict=False) for c in pair]
    unmeasured = [f"{w}: this kernel has no {q} queueing discipline" for w, q in missing.items()]
    if args.hosts != "netns":
        unmeasured.append(f"{', '.join(NETWORK_WAYS)}: a network fault needs netns hosts (`--hosts netns`)")
    return mixed + slowed[len(clean) :] + clean[len(slowed) :], unmeasured


def run(args, out_dir: Path) -> BenchResult:
    cells, unmeasured = cells_of(args)
    outcomes, minutes = run_in_temp(
        "stragglers",
        cells,
        args.side_by_side,
        lambda cell, tmp, stop: run_cell(cell, args.hosts, tmp, stop),
        lambda n, of, outcome: print(f"[{n}/{of}] {outcome.cell.name}: {said(outcome)}", flush=True),
    )
    return BenchResult(
        name="stragglers",
        command=this_command(),
        markdown=table(outcomes, args.hosts, minutes, unmeasured),
        figures={"cells": [o.to_json() for o in outcomes], "minutes": round(minutes, 1)},
    )


def said(outcome: Outcome) -> str:
    named = outcome.named
    if named is None:
        return outcome.verdict
    if isinstance(named, SlowNetwork):
        where = f"{named.node} (ranks {', '.join(map(str, named.ranks))})"
    else:
        where = f"rank {named.rank}"
    return f"{outcome.verdict}: {where} at step {named.step} (score {named.score:.1f})"


def table(outcomes: list[Outcome], hosts: str, minutes: float, unmeasured: list[str]) -> list[str]:
    slowed = [o for o in outcomes if o.cell.rank is not None]
    clean = [o for o in outcomes if o.cell.rank is None]
    lines = [
        f"One rank of a 2 x 2 run of the lab's trainer ({hosts} hosts, {STEP_TIME:g} s a step) slowed after a "
        f"step and kept slow for up to {AFTER} steps (the cell ends once its finding is named); `lab why` "
        f"names a straggler when its busy time outside the "
        f"all-reduce, over {WINDOW} steps less the slowest, is {RATIO:g}x the other ranks' and {MARGIN_S:g} s "
        f"longer (lab.health.stragglers). A slow network is named on its node: its round trip to the lab's bridge "
        f"(lab.health.net_probe, twice a second), median of {NET_WINDOW}, {RATIO:g}x the other nodes' and "
        f"{NET_MARGIN_S * 1000:g} ms longer; right when the node holds the slowed rank. Clean runs slow nothing and "
        "ran beside the others.",
        "",
        "| slowed by | cells | named in time | steps to name (max) | late | missed | wrong rank, kind | false alarm |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for way, what in WAYS.items():
        mine = [o for o in slowed if o.cell.way == way]
        if not mine:
            continue
        steps = [o.steps_to_name for o in mine if o.verdict == "named" and o.steps_to_name is not None]
        count = {v: sum(1 for o in mine if o.verdict == v) for v in ("named", "late", "missed", "wrong")}
        alarms = sum(1 for o in mine if o.verdict == "false alarm")
        lines.append(
            f"| {way} ({what}) | {len(mine)} | {count['named']} | {max(steps, default='-')} | {count['late']} | "
            f"{count['missed']} | {count['wrong']} | {alarms} |"
        )
    alarms = sum(1 for o in clean if o.verdict == "false alarm")
    if clean:
        clean_steps = sum(o.cell.steps for o in clean)
        lines.append(f"| nothing (clean runs) | {len(clean)} ({clean_steps:,} steps) | - | - | - | - | - | {alarms} |")
    in_time = sum(1 for o in slowed if o.verdict == "named")
    lines += [
        "",
        goal_line(
            f"named within {GOAL_STEPS} steps in every slowed cell", in_time == len(slowed), f"{in_time}/{len(slowed)}"
        ),
        goal_line(
            "0 false alarms in >= 1,000 clean steps beside the slowed runs",
            alarms == 0 and sum(o.cell.steps for o in clean) >= 1000,
            f"{alarms} in {sum(o.cell.steps for o in clean):,} steps of {len(clean)} runs",
        ),
        "",
        f"{len(outcomes)} cells in {minutes:.1f} min." + "".join(f" Not measured: {u}." for u in unmeasured),
    ]
    for o in outcomes:
        if o.verdict not in ("named", "clean"):
            lines.append(f"- {o.cell.name}: {said(o)}")
    return lines
