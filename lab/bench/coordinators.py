"""`lab bench coordinators`: kill each coordinator of a running job and judge what followed.

    lab bench coordinators [--coordinators c10d,lab-store,etcd,prometheus,ray-head]
                           [--runtimes local,docker,ray] [--trials 3]
                           [--hosts loopback|netns] [--side-by-side 2] [--keep DIR]

Each cell is a 2 x 2 run of the lab's trainer whose coordinator is SIGKILLed once rank 0 has
completed a step: on the local runtime (lab.bench.coordinator_cell) the c10d or lab rendezvous
store (node 0's agent, which hosts it), the lab's etcd, the lab's Prometheus; the stores again on
the docker runtime (node 0's agent in its container); on the ray
runtime (lab.bench.ray_head_cell) the head of a real two-machine Ray cluster the cell starts
on netns hosts. The table gives each one's verdict (survived, failed fast with the lab's
reason, or hung), the seconds from the kill to it, and the timeout it is judged against: no
case may run past twice that.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from lab.bench import BENCH_RUNTIMES, TRIALS, coordinator_cell, ray_head_cell
from lab.bench.coordinator_cell import COORDINATORS, KILL_AT, STEP_TIME, STEPS, Cell, Outcome
from lab.bench.diagnosis import BENCH_HOSTS, HOST_KINDS, KEEP, SIDE_BY_SIDE, listed
from lab.bench.result import BenchResult, goal_line, this_command
from lab.bench.side_by_side import run_in_temp
from lab.errors import LabError
from lab.options import Option
from lab.runtimes import netns

WHICH = Option(
    "--coordinators",
    f"the coordinators to kill, comma-separated: {', '.join(COORDINATORS)} (default: all this machine can)",
    "",
)
RUNTIMES = tuple(dict.fromkeys(r for c in COORDINATORS.values() for r in c.runtimes))  # local, docker, ray
RUNTIMES_OPTION = BENCH_RUNTIMES.but(
    help="where the coordinators are killed, comma-separated: local, docker (node 0's agent in its container), ray "
    "(a two-machine Ray cluster of netns hosts) (default: local, and ray where netns hosts can be made)",
    default="",
)


def add_arguments(p) -> None:
    BENCH_HOSTS.add_to(p)
    kept = KEEP.but(help="keep each local cell's evidence and verdict under this folder")
    trials = TRIALS.but(help="cells per coordinator and runtime (default %(default)s)")
    for option in (WHICH, RUNTIMES_OPTION, trials, SIDE_BY_SIDE, kept):
        option.add_to(p)


def cells_of(args) -> list[Cell]:
    if args.hosts not in HOST_KINDS:
        raise LabError(f"--hosts: the coordinators bench runs on {' or '.join(HOST_KINDS)} hosts; got {args.hosts}")
    no_cluster = netns.unavailable_reason()
    try:
        chosen = listed("--runtimes", RUNTIMES)(args.runtimes or ("local" if no_cluster else "local,ray"))
        possible = [k for k, c in COORDINATORS.items() if set(c.runtimes) & set(chosen)]
        keys = listed("--coordinators", tuple(COORDINATORS))(args.coordinators or ",".join(possible))
    except ValueError as e:
        raise LabError(str(e)) from None
    if no_cluster and "ray" in chosen:
        raise LabError(f"--runtimes ray: the bench's Ray cluster's machines are netns hosts, and {no_cluster}")
    for key in keys:
        if not set(COORDINATORS[key].runtimes) & set(chosen):
            where = " and ".join(COORDINATORS[key].runtimes)
            raise LabError(f"--coordinators {key}: measured on the {where} runtime; add --runtimes {where}")
    if args.trials < 1:
        raise LabError(f"--trials: at least 1; got {args.trials}")
    if args.side_by_side < 1:
        raise LabError(f"--side-by-side: at least 1 cell at a time; got {args.side_by_side}")
    return [
        Cell(COORDINATORS[key], runtime, trial)
        for trial in range(args.trials)
        for key in keys
        for runtime in COORDINATORS[key].runtimes
        if runtime in chosen
    ]


def run(args, out_dir: Path) -> BenchResult:
    outcomes, minutes = run_in_temp(
        "coordinators",
        cells_of(args),
        args.side_by_side,
        lambda cell, tmp, stop: run_cell(cell, args.hosts, tmp, args.keep, stop),
        lambda n, of, o: print(f"[{n}/{of}] {o.cell.name}: {o.verdict} in {o.seconds:.1f} s: {o.said}", flush=True),
    )
    return BenchResult(
        name="coordinators",
        command=this_command(),
        markdown=table(outcomes, args.hosts, minutes),
        figures={"cells": [o.to_json() for o in outcomes], "minutes": round(minutes, 1)},
    )


def run_cell(cell: Cell, hosts: str, tmp: Path, keep: str, stop) -> Outcome:
    if cell.coordinator.own_cluster:  # its evidence is on the cluster's machines
        return ray_head_cell.run_cell(cell, tmp, stop)
    return coordinator_cell.run_cell(cell, hosts, tmp, keep, stop)


def row(mine: list[Outcome]) -> str:
    coordinator, runtime = mine[0].cell.coordinator, mine[0].cell.runtime
    verdicts = ", ".join(f"{v} {sum(o.verdict == v for o in mine)}" for v in dict.fromkeys(o.verdict for o in mine))
    seconds = [o.seconds for o in mine]
    hung = sum(not o.within_twice_timeout for o in mine)
    return (
        f"| {coordinator.key}: {coordinator.what} | {runtime} | {len(mine)} | {verdicts} "
        f"| {statistics.median(seconds):.1f}, {max(seconds):.1f} | {coordinator.timeout_s} | {hung} | {mine[0].said} |"
    )


def table(outcomes: list[Outcome], hosts: str, minutes: float) -> list[str]:
    lines = [
        f"A 2 x 2 run of the lab's trainer ({STEPS} steps of {STEP_TIME:g} s, restarts left) whose coordinator is "
        f"SIGKILLed once rank 0 has completed step {KILL_AT}: on the local runtime ({hosts} hosts), the docker "
        "runtime, or the ray runtime over a two-machine Ray cluster of netns hosts. Seconds: from the kill to the "
        "verdict (the job's end, or the deadline: twice the timeout, plus the steps still to run).",
        "",
        "| killed | runtime | cells | verdict | seconds (median, max) | timeout (s) | beyond 2x timeout "
        "| what the lab says |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, coordinator in COORDINATORS.items():
        for runtime in coordinator.runtimes:
            mine = [o for o in outcomes if o.cell.coordinator.key == key and o.cell.runtime == runtime]
            if mine:
                lines.append(row(mine))
    hung = sum(not o.within_twice_timeout for o in outcomes)
    unexplained = sum(o.verdict == "failed unexplained" for o in outcomes)
    return [
        *lines,
        "",
        goal_line("0 hangs beyond twice the configured timeout", hung == 0, f"{hung} of {len(outcomes)}"),
        goal_line("every failure says why", unexplained == 0, f"{unexplained} unexplained"),
        "",
        f"{len(outcomes)} cells in {minutes:.1f} min.",
    ]
