"""`lab bench recovery`: kill a worker, time until the recovered group's first step, per recovery style.

    lab bench recovery [--trials 5] [--hosts loopback|netns] [--styles a,b,...] [--runtimes local,docker]
                       [--worlds 4,8,16]

Every trial runs each style once, in turn, so that the machine's noise falls on all of
them alike (lab.bench.recovery_styles): bare torchrun, the lab's restart with spawned
workers, with preloaded workers, tuned, and in-process recovery. The table gives the
median kill-to-first-step, its range, the work lost (steps done twice), and each
style's median stages. The lab's own styles run on each of --runtimes (the first one's rows
carry the style's bare name, the others' "STYLE on RUNTIME"); bare torchrun runs once, as
plain processes. --worlds times the lab's styles at each world size (2 ranks a node: 16 is
8 netns hosts), rows named "STYLE at N ranks", each stage against the size (bare torchrun
at 4 only; the rows at 4 keep their names). Then the gloo abort probe (lab.bench.gloo_abort),
the finding that made in-process recovery end a frozen rank itself (lab.inprocess.heartbeat).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from lab import runtimes
from lab.bench import BENCH_RUNTIMES, CAMPAIGN_LOAD, LOAD_HELP, QUIET_GOALS, TRIALS, beside, gloo_abort, loaded
from lab.bench.recovery_styles import LAB_STYLES, STEP_TIME, STYLES, trial
from lab.bench.result import BenchResult, goal_line, this_command
from lab.chaos import load, schedule
from lab.errors import LabError
from lab.runtimes.local import HOSTS

GOAL_S = 1.0
WORLD = 4  # the table's world size, 2 x 2, where --worlds is not given
IN_PROCESS_GOAL_S = 0.5  # issue 31: the default kill-worker, on this machine's hosts


def sections() -> list[str]:
    """The quiet figures, and those beside a campaign's load (lab bench goodput projects a campaign from both)."""
    return ["recovery", loaded("recovery", CAMPAIGN_LOAD)]


def add_arguments(p) -> None:
    TRIALS.but(default=5).add_to(p)
    schedule.LOAD.but(help=LOAD_HELP).add_to(p)
    HOSTS.but(default="loopback").add_to(p)
    p.add_argument("--styles", default=",".join(STYLES), help="which, comma-separated (default: all)")
    where = "where the lab's styles run, comma-separated, e.g. local,docker (default %(default)s)"
    BENCH_RUNTIMES.but(help=where).add_to(p)
    p.add_argument(
        "--worlds", default=str(WORLD), help="world sizes, 2 ranks a node, e.g. 4,8,16 (default %(default)s)"
    )


def chosen_worlds(text: str, styles: list[str]) -> list[int]:
    """--worlds as even sizes of 4 or more (2 ranks a node, 2 nodes or more); one line if not."""
    try:
        worlds = sorted({int(w) for w in text.split(",") if w.strip()})
    except ValueError:
        raise LabError(f"--worlds {text!r}: world sizes are whole numbers, like 4,8,16") from None
    wrong = [w for w in worlds if w < 4 or w % 2]
    if wrong or not worlds:
        raise LabError(f"--worlds: each size is even and 4 or more (2 ranks a node, 2 nodes or more); not {wrong}")
    if WORLD not in worlds and "bare torchrun" in styles:
        raise LabError(
            "--worlds: bare torchrun is timed at 4 ranks only; add 4, or name the lab's styles with --styles"
        )
    return worlds


def chosen_runtimes(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = runtimes.names()
    unknown = [n for n in names if n not in known or n == runtimes.AUTO]
    if unknown or not names:
        choices = ", ".join(n for n in known if n != runtimes.AUTO)
        raise LabError(f"--runtimes: unknown {', '.join(unknown) or '(none given)'}; choose from {choices}")
    return names


def cells(styles: list[str], where: list[str], worlds: tuple[int, ...] = (WORLD,)) -> list[tuple[str, str, str, int]]:
    """(row name, style, runtime, world size) for every row of the table: the lab's styles on
    every runtime, at every world size (bare torchrun at 4 only). The rows at 4 keep their bare
    names: they are what `lab bench goodput` reads."""
    rows = []
    for world in worlds:
        at = "" if world == WORLD else f" at {world} ranks"
        for i, runtime in enumerate(where):
            for style in styles:
                if style in LAB_STYLES or (i == 0 and world == WORLD):
                    rows.append((f"{style}{'' if i == 0 else f' on {runtime}'}{at}", style, runtime, world))
    return rows


def chosen_styles(text: str) -> list[str]:
    styles = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in styles if s not in STYLES]
    if unknown or not styles:
        raise LabError(f"--styles: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(STYLES)}")
    return styles


def median_stages(details: list[dict]) -> dict:
    names = details[0]["stages"]
    found = {k: [d["stages"][k] for d in details if d["stages"].get(k) is not None] for k in names}
    return {k: statistics.median(v) for k, v in found.items() if v}


def run(args, out_dir: Path) -> BenchResult:
    if args.trials < 1:
        raise LabError("--trials must be at least 1")
    schedule.check_load(args.load)
    styles = chosen_styles(args.styles)
    table = cells(styles, chosen_runtimes(args.runtimes), tuple(chosen_worlds(args.worlds, styles)))
    seconds: dict[str, list[float]] = {row: [] for row, *_ in table}
    details: dict[str, list[dict]] = {row: [] for row, *_ in table}
    with tempfile.TemporaryDirectory(prefix="lab-bench-") as tmp, load.busy(args.load, None):
        for i in range(args.trials):
            for row, style, runtime, world in table:
                took, detail = trial(style, Path(tmp), args.hosts, runtime, world)
                seconds[row].append(took)
                details[row].append(
                    {**detail, "runtime": runtime if style in LAB_STYLES else "processes", "world": world}
                )
            print(f"trial {i + 1}: " + ", ".join(f"{s} {seconds[s][-1]:.2f} s" for s in seconds), flush=True)
    print("probing gloo's abort() of a collective that waits for a hung peer ...", flush=True)
    abort = gloo_abort.probe("abort")
    medians = {s: statistics.median(v) for s, v in seconds.items()}
    rows = {
        s: {
            "runtime": details[s][0]["runtime"],
            "world": details[s][0]["world"],
            "median_s": medians[s],
            "trials_s": seconds[s],
            "work_lost_steps": statistics.median(d["work_lost_steps"] for d in details[s]),
            "stages": median_stages(details[s]),
        }
        for s in seconds
    }
    saves = [d["checkpoint_s"] for ds in details.values() for d in ds if d["checkpoint_s"] is not None]
    checkpoint_s = statistics.median(saves) if saves else None
    return BenchResult(
        loaded("recovery", args.load),
        this_command(),
        report(args, rows, abort),
        {"styles": rows, "checkpoint_s": checkpoint_s, "step_s": STEP_TIME, "gloo_abort": abort, "load": args.load},
    )


def report(args, rows: dict, abort: dict) -> list[str]:
    lines = [
        f"{beside(args.load)}Kill to the first step after recovery, median of {args.trials} trials, the styles "
        f"in turn in every trial ({args.hosts} hosts for the lab's styles; bare torchrun on loopback), 2 ranks a node, "
        f"the trainer's model at 0.1 s a step, rank 1 SIGKILLed at step 25, checkpoints every 10 steps "
        "(your script: lab/workloads/plain_train.py, an ordinary DDP script with no lab import, at 0.1 s a step, "
        "rank 0 snapshotting every 10 steps):",
        "",
        "| style | runtime | ranks | median | range | work lost (steps) | stages, medians (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for style, row in rows.items():
        stages = ", ".join(f"{k} {v:.2f}" for k, v in row["stages"].items() if k != "total")
        stages = stages or "(none recorded: torch writes no agent events)"
        lines.append(
            f"| {style} | {row['runtime']} | {row['world']} | {row['median_s']:.2f} s | "
            f"{min(row['trials_s']):.2f}-{max(row['trials_s']):.2f} | {row['work_lost_steps']:g} | {stages} |"
        )
    lines.append("")
    lines += _goals(rows) if not args.load else [QUIET_GOALS]
    if "tuned" in rows and "bare torchrun" in rows:
        bare = rows["bare torchrun"]["median_s"]
        lines.append(
            f"- The tuned restart takes {100 * rows['tuned']['median_s'] / bare:.0f}% of bare torchrun's time."
        )
    lines += [
        f"- gloo's ProcessGroup.abort() on a collective waiting for a hung peer: abort() returned in "
        f"{abort['abort_s'] * 1000:.2f} ms and the all_reduce still waited {abort['collective_s']:.2f} s, its "
        f"whole {gloo_abort.TIMEOUT_S:g} s timeout (`python -m lab.bench.gloo_abort`). In-process recovery "
        "is fast from a death (the peer's sockets close); a frozen rank's keeper hears no heartbeat and makes "
        "the hang a death (lab.inprocess.heartbeat).",
    ]
    return lines


def _goals(rows: dict) -> list[str]:
    found: list[str] = []
    if "tuned" in rows:
        tuned = rows["tuned"]["median_s"]
        found.append(goal_line(f"a tuned torchrun restart under {GOAL_S:g} s", tuned < GOAL_S, f"{tuned:.2f} s"))
    for row, limit in (
        ("in-process", IN_PROCESS_GOAL_S),
        ("in-process at 16 ranks", IN_PROCESS_GOAL_S),  # issue 53: 8 netns hosts of 2 on this machine
        ("in-process on docker", GOAL_S),
        ("your script (tuned)", GOAL_S),
        ("your script (tuned) on docker", GOAL_S),
    ):
        if row in rows:
            took = rows[row]["median_s"]
            goal = f"{row}, the default drill's style, under {limit:g} s"
            found.append(goal_line(goal, took < limit, f"{took:.2f} s"))
    return found
