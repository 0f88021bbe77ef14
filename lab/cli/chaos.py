"""`lab chaos [--count N | --duration D] [--mtbf 20s] [--mix kill-worker=4,...] [--seed S] [--load N]`

Faults drawn at random from a seeded schedule, on one long run of the lab's trainer, some of
them inside the recovery of the one before; each recovery judged against a bound, then the
final weights against an uninterrupted run. Writes chaos.json and chaos.md (the ledger) to the
report dir. Exit 0 when every fault was injected, none got stuck and the weights are
bit-identical; 1 otherwise. Everything is checked before anything starts.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from lab import chaos, files, output_paths, runtimes
from lab.chaos import ledger, schedule
from lab.chaos.on_script import TRAINER_ONLY, ScriptTarget
from lab.cli.flags import REPORT_DIR, add_run_dir_option, add_verbose
from lab.errors import LabError
from lab.exercises import DrillOptions
from lab.exercises.script import spec
from lab.options import NODES, NPROC_PER_NODE, RECOVERY, Option, add_all, given, run_dir_from_args

OPTIONS = (
    schedule.COUNT,
    Option("--duration", "draw faults for this long, like 10m (or --count)"),
    schedule.MTBF,
    Option(
        "--mix",
        f"kinds and weights, like kill-worker=4,hang-worker=1 (default: {schedule.DEFAULT_MIX}; "
        f"by name only: {', '.join(k for k in schedule.KINDS if k not in schedule.DEFAULT_MIX)})",
    ),
    schedule.SEED,
    schedule.LOAD,
)


def register(sub) -> None:
    parser = sub.add_parser("chaos", help="random faults on one long job, some inside a recovery; a ledger")
    add_all(
        parser,
        (
            *OPTIONS,
            NODES.but(default=None, help="number of hosts (default 2)"),
            NPROC_PER_NODE.but(default=None, help="workers per host (default 2)"),
            RECOVERY,
            REPORT_DIR,
        ),
    )
    group = parser.add_argument_group("your own script (instead of the lab's trainer)")
    for option in SCRIPT_OPTIONS:  # recorded: one given without --script is refused, at any value
        option.add_to(group, recorded=True)
    parser.add_argument("script_args", nargs="*", metavar="-- ARGS", help="arguments for --script")
    runtimes.add_options(parser, drills_only=True, default="local")
    add_verbose(parser)
    add_run_dir_option(parser)
    parser.set_defaults(handler=handle, monitoring="off")


SCRIPT_OPTIONS = (spec.SCRIPT, spec.PROGRESS_REGEX, spec.COMPARE, spec.RTOL, spec.DEADLINE)


def script_target(args: argparse.Namespace, runtime, where: Path) -> ScriptTarget | None:
    """The user's script as the campaign's job (lab.chaos.on_script), or None: the lab's trainer.
    One line for a --script flag without --script, or a recovery the script cannot take."""
    if not args.script:
        named = [o.flag for o in SCRIPT_OPTIONS if o.name in given(args)]
        if named or args.script_args:
            raise LabError(f"{', '.join(named) or 'arguments after --'}: only with --script (your own training script)")
        return None
    if args.recovery == "in-process":
        raise LabError(
            "--recovery in-process: not behind lab chaos on your script yet (lab run --recovery in-process "
            "SCRIPT runs it); use restart or torchrun"
        )
    # The script-drill flags a campaign has no use for, at their defaults (never accepted and ignored).
    told = spec.spec_from_args(argparse.Namespace(**vars(args), at_time=15.0, ckpt_dir=None, workdir=None))
    return ScriptTarget(told, runtime.script_workdir("chaos"), runtime.script_workdir("chaos-reference"), where)


def plan_from_args(args: argparse.Namespace) -> chaos.Plan:
    """The schedule the flags ask for, or one line saying what is wrong with them."""
    if not runtimes.registry()[args.runtime].CHAOS:  # the runtime says whether its nodes are proven
        ready = ", ".join(name for name, runtime in runtimes.registry().items() if runtime.CHAOS)
        raise LabError(
            f"lab chaos does not run on --runtime {args.runtime} yet: its faults are proven on {ready} "
            f"(lab exercise run takes a drill to {args.runtime})"
        )
    if (args.count is None) == (args.duration is None):
        raise LabError("say how long, one way: --count N or --duration D")
    schedule.check_load(args.load)
    mtbf = schedule.seconds(args.mtbf, "--mtbf")
    duration = schedule.seconds(args.duration, "--duration") if args.duration is not None else None
    cut = runtimes.registry()[args.runtime].network_fault_refusal(args)
    refused = {k.name: cut for k in schedule.KINDS.values() if k.cuts_network and cut}
    if args.script:
        refused.update({kind: f"on your script, {why}" for kind, why in TRAINER_ONLY.items()})
    mix = schedule.parse_mix(args.mix, refused)
    faults = schedule.draw(mix, mtbf, args.seed, count=args.count, duration_s=duration)
    return chaos.Plan(faults, args.seed, args.load)


def handle(args: argparse.Namespace) -> int:
    from lab.exercises.engine import run_drill

    plan = plan_from_args(args)
    chosen = output_paths.output_dir(args.report_dir, "--report-dir")
    run_dir = run_dir_from_args(args)
    where = chosen or run_dir.reports / f"chaos-{time.strftime('%Y%m%d-%H%M%S')}"
    runtime = runtimes.from_args(args, run_dir, shared=runtimes.DRILL_FLAGS)
    options = DrillOptions(0, 1, nodes=args.nodes, nproc_per_node=args.nproc_per_node, recovery=args.recovery)
    exercise = chaos.exercise(plan, script_target(args, runtime, where))
    print(f"chaos: {len(plan.faults)} faults, seed {plan.seed}, over about {plan.faults[-1].at_s:.0f}s; "
          f"load {plan.load}")  # fmt: skip
    try:
        report = run_drill(exercise, options, runtime, verbose=args.verbose)
    except KeyboardInterrupt:
        if exercise.partial is not None:  # torn down already: what ran is still told
            write_ledger(run_dir, where, exercise.partial, exercise.logs)
        raise
    record = report.facts["ledger"]
    record["recovery_style"] = report.facts.get("recovery_style", {}).get("style", record["recovery_style"])
    report.summary()
    write_ledger(run_dir, where, record, exercise.logs)
    return 0 if report.verdict == "pass" else 1


def write_ledger(run_dir, where, record: dict, logs: dict[str, str]) -> None:
    """chaos.json, chaos.md, and each node's log as nodes/NAME.log (the run dir's go with `lab down`)."""
    run_dir.claim_for_report(where)
    (where / "nodes").mkdir(parents=True, exist_ok=True)
    for name, text in logs.items():
        files.write_text(where / "nodes" / f"{name}.log", text)
    files.write_text(where / "chaos.json", json.dumps(record, indent=2) + "\n")
    files.write_text(where / "chaos.md", ledger.markdown(record))
    print(ledger.markdown(record))
    print(
        f"ledger: {where / 'chaos.json'}, {where / 'chaos.md'}" + (f"; node logs in {where / 'nodes'}" if logs else "")
    )
