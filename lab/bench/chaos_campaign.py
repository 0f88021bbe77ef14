"""`lab bench chaos`: a long chaos campaign, its ledger summarised by fault kind.

    lab bench chaos [--count 100] [--mtbf 15s] [--load 2] [--seed 1] [--runtime docker] [--target plain-train]

Runs `lab chaos` itself (the same act, its own process, its output streamed): faults drawn
from a seeded schedule on one long trainer job, beside busy processes, some inside the
recovery of the one before (--target plain-train: the lab's ordinary script, no lab import,
struck as a user's script is and compared by its final weights; --runtime docker: in
containers; each its own section). The section gives the campaign's wall time, the measured ETTR,
the work redone, and per kind how many struck and how long recovery took (median and
worst), against the goals: no stuck recovery, every fault injected, the final weights
bit-identical to an uninterrupted run, 100 faults in an hour on this machine.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lab import files, procs, runtimes
from lab.bench import CAMPAIGN_LOAD
from lab.bench.result import BenchResult, goal_line, this_command
from lab.chaos import schedule
from lab.chaos.on_script import TRAINER_ONLY
from lab.errors import LabError
from lab.options import Option, add_all
from lab.workloads import script_path

TARGETS = ("trainer", "plain-train")
OPTIONS = (  # lab chaos's own flags, with the defaults of `make chaos`
    schedule.COUNT.but(default=100, help="how many faults (default %(default)s)"),
    schedule.MTBF.but(default="15s"),
    schedule.LOAD.but(default=CAMPAIGN_LOAD),
    schedule.SEED,
    Option("--target", "the job struck (default %(default)s)", "trainer", choices=TARGETS),
)
LOCAL = "local"  # the runtime `make chaos` runs on, whose section keeps the plain name
SCRIPT_TAIL_S = 60.0  # plain_train's steps past the last planned fault
# plain_train's pace, about what its 4 ranks manage beside 2 busy processes on 2 cores (29 steps a
# second, measured): paced at 0.02 s the job ran 1.7x longer than sized, 16 minutes of it after
# the last fault, and its reference as long again (a user's script has no unpaced mode)
PLAIN_STEP_S = 0.035
HOUR_S = 3600.0


def add_arguments(parser) -> None:
    add_all(parser, OPTIONS)
    runtimes.add_runtime_flag(parser, runtimes.chaos_runtimes(), "local")


def run(args, out_dir: Path) -> BenchResult:
    schedule.seconds(args.mtbf, "--mtbf")  # a bad flag is one line before anything starts
    schedule.check_load(args.load)
    name = section_name(args.runtime, args.target)
    # The campaign's report stays beside the results: its ledger and each node's log (a slow
    # recovery's logs once went with a temp dir, unexplained). Not published (.gitignore).
    report = out_dir / f"{name}-report"
    with tempfile.TemporaryDirectory(prefix="lab-bench-chaos-") as tmp:
        argv = [sys.executable, "-m", "lab", "chaos", "--count", str(args.count), "--mtbf", args.mtbf]
        argv += ["--load", str(args.load), "--seed", str(args.seed), "--report-dir", str(report)]
        argv += ["--run-dir", str(Path(tmp) / "run"), "--runtime", args.runtime, *_target(args)]
        began, since = time.monotonic(), time.time()
        code = procs.run_child_lab(argv).returncode  # its progress straight to this terminal; stopped, it tears down
        took = time.monotonic() - began
        ledger = report / "chaos.json"
        raw = files.read_regular(ledger, 16 << 20)
        if raw is None or ledger.lstat().st_mtime < since:  # an earlier run's, left in the same report dir
            raise LabError(f"the campaign wrote no ledger (lab chaos exited {code})")
        record = json.loads(raw)
    record["campaign_s"] = round(took, 1)
    print(f"the campaign's report and its nodes' logs: {report}", flush=True)
    return BenchResult(name, this_command(), section(record), figures=record)


def section_name(runtime: str, target: str) -> str:
    """`make chaos`'s campaign (the trainer, on the local runtime) keeps the plain name; the others add theirs."""
    return "-".join(["chaos", *(v for v, usual in ((runtime, LOCAL), (target, "trainer")) if v != usual)])


def sections() -> list[str]:
    """Every section this bench can publish, in docs/benchmarks.md's order (lab bench docs)."""
    kinds = sorted(runtimes.chaos_runtimes(), key=lambda r: r != LOCAL)  # the local runtime's first
    return [section_name(r, t) for t in TARGETS for r in kinds]


def _target(args) -> list[str]:
    """lab chaos's flags for the job struck: plain_train runs until a minute past the schedule's
    last fault (at its pace: recoveries lengthen the job as they delay the faults), snapshots
    every 20 steps and writes its weights at the end. Its numbers are compared within 1e-3: DDP
    regroups its gradient buckets after a resume, and at 4 ranks gloo's ring then sums some
    elements in another order (docs/chaos.md); the trainer is the bit-identical one."""
    if args.target == "trainer":
        return []
    mix = schedule.parse_mix(None, refused=dict(TRAINER_ONLY))  # lab chaos --script's default mix
    planned = schedule.draw(mix, schedule.seconds(args.mtbf, "--mtbf"), args.seed, count=args.count, duration_s=None)
    steps = int((planned[-1].at_s + SCRIPT_TAIL_S) / PLAIN_STEP_S)
    script = ["--steps", str(steps), "--step-time", str(PLAIN_STEP_S), "--snapshot-every", "20"]
    script += ["--timeout-s", "20", "--result", "result.txt"]
    return ["--script", script_path("plain_train"), "--compare", "result.txt", "--rtol", "1e-3", "--", *script]


def section(record: dict) -> list[str]:
    """The ledger by kind, its figures and its goals, as markdown lines."""
    faults = [f for f in record["faults"] if f["time"] is not None]
    lines = [
        f"`lab chaos` with seed {record['seed']}: {record['faults_injected']} of {record['faults_planned']} faults "
        f"injected ({record['faults_inside_a_recovery']} inside a recovery), {record['recovery_style']} recovery, "
        f"{record['world_size']} ranks on {_hosts(record)}, {record['load']} busy process(es) beside the job; "
        f"{record['campaign_s'] / 60:.1f} min in all.",
        "",
        f"- wall {record['wall_s']:.0f} s from the first step to the last: productive {record['productive_s']:.0f} s, "
        f"recovery {sum(record['recovery_s'].values()):.0f} s, checkpoints {record['checkpoint_s']:.1f} s",
        f"- measured ETTR {100 * (record['ettr'] or 0):.1f}%; steps redone {record['steps_redone']}; "
        f"final {_weights(record['final_weights'])}",
        "",
        "| fault | struck | back in, median s | worst s | bound s | findings |",
        "|---|---|---|---|---|---|",
    ]
    for kind in sorted({f["kind"] for f in faults}):
        mine = [f for f in faults if f["kind"] == kind]
        back = [f["recovered_s"] for f in mine if f["recovered_s"] is not None]
        median = f"{statistics.median(back):.2f}" if back else "-"
        worst = f"{max(back):.2f}" if back else "-"
        found = sum(1 for f in mine if f["finding"])
        lines.append(f"| {kind} | {len(mine)} | {median} | {worst} | {mine[0]['bound_s']:.0f} | {found} |")
    lines += [""] + [f"- Finding: {f['kind']} at step {f['front']}: {f['finding']}" for f in record["findings"]]
    lines += [
        goal_line("no stuck recovery", record["stuck"] == 0, f"{record['stuck']} past their bound"),
        goal_line(
            "every fault injected",
            record["faults_injected"] == record["faults_planned"],
            f"{record['faults_injected']} of {record['faults_planned']}",
        ),
        _weights_goal(record["final_weights"]),
        *_data_goal(record.get("samples")),
        goal_line(
            ">= 100 faults in <= 60 minutes",
            record["faults_injected"] >= 100 and record["campaign_s"] <= HOUR_S,
            f"{record['faults_injected']} in {record['campaign_s'] / 60:.1f} min",
        ),
    ]
    return lines


def _weights(weights: dict) -> str:
    if weights.get("reference_ended") is False:
        return f"result {weights['why']}"
    if weights.get("compared"):  # a script's result file (lab.chaos.on_script)
        return f"{weights['compared']} {'as' if weights['identical'] else 'differs from'} an uninterrupted run's"
    return "weights " + ("bit-identical to an uninterrupted run" if weights.get("identical") else "differ")


def _weights_goal(weights: dict) -> str:
    if weights.get("compared"):
        return goal_line("final result as an uninterrupted run's", bool(weights["identical"]), weights["how"])
    return goal_line("final weights bit-identical", bool(weights.get("identical")), weights.get("why") or "same bits")


def _hosts(record: dict) -> str:
    """Where the campaign ran (a ledger from before it said so: the local runtime's netns hosts)."""
    kind = runtimes.registry()[record.get("runtime", LOCAL)].NODES_ARE
    return f"{record.get('nodes', 2)} {kind}"


def _data_goal(samples: dict | None) -> list[str]:
    """Exactly-once data, where the ranks recorded their samples (lab.exercises.samples)."""
    if samples is None:
        return []
    clean = not samples["repeated"] and not samples["skipped"]
    return [goal_line("every sample once per epoch", clean, samples["why"])]
