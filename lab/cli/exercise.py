"""`lab exercise list | explain NAME | run NAME`: fault drills and the lesson's claims, judged.

Two kinds share these commands: fault drills (lab.exercises: break a running job on
purpose) and lesson exercises (lab.lessons: run small jobs side by side and compare).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lab import exercises
from lab.cli.options import add_run_dir_option, run_dir_from_args
from lab.errors import LabError
from lab.lessons.runner import DEPTHS, explain, run_lesson
from lab.runtimes.local import HOST_MODES, PROMETHEUS_MODES


def register(sub) -> None:
    parser = sub.add_parser("exercise", help="fault drills and lesson exercises, judged with a verdict")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=type(parser))
    verbs.add_parser("list", help="list the exercises").set_defaults(handler=handle_list)
    explain = verbs.add_parser("explain", help="the hypothesis, the command and what to watch")
    explain.add_argument("name")
    explain.add_argument("--depth", choices=DEPTHS,
                         help="lesson exercises: the explanation for a beginner, a developer or a researcher")
    explain.set_defaults(handler=handle_explain)
    run = verbs.add_parser("run", help="run one exercise; exit 0 on pass, 1 on fail")
    run.add_argument("name")
    run.add_argument("--target-rank", type=int, help="the rank the fault hits (default: the exercise's)")
    run.add_argument("--at-step", type=int, help="inject when the target rank reaches this step")
    run.add_argument("--runtime", choices=("local", "docker", "ray"), default="local",
                     help="where the nodes run: netns hosts or processes (local), containers (docker), or "
                          "one per machine of a Ray cluster (ray, with --ray-address)")
    run.add_argument("--image", help="docker runtime: the node image (default: $LAB_IMAGE or torchrun-lab:cpu)")
    run.add_argument("--hosts", choices=HOST_MODES, default="auto")
    run.add_argument("--prometheus", choices=PROMETHEUS_MODES, default="off")
    run.add_argument("--torch-defaults", action="store_true", help="leave out the lab's restart workaround")
    run.add_argument("--elastic", action="store_true", help="kill-node: an elastic job (--nnodes=1:N)")
    run.add_argument("--rdzv-backend", choices=("c10d", "etcd-v2"), default="c10d",
                     help="kill-rendezvous-host: where the rendezvous lives (etcd-v2: a lab-run etcd on the host)")
    run.add_argument("--ray-address", help="join this Ray cluster instead of starting a local instance "
                                           "(needed by --runtime ray)")
    run.add_argument("--report-dir", help="where report.json and timeline.png go (default: under the run dir)")
    add_run_dir_option(run)
    run.set_defaults(handler=handle_run)


def handle_list(args: argparse.Namespace) -> int:
    found = exercises.all_exercises()
    for title, kind in (("fault drills", "drill"), ("lesson exercises (see the README's learning path)", "lesson")):
        print(f"{title}:")
        for name, module in found.items():
            if exercises.kind(module) == kind:
                print(f"  {name:<26} {module.SUMMARY}")
    return 0


def handle_explain(args: argparse.Namespace) -> int:
    exercise = exercises.load(args.name)
    if exercises.kind(exercise) == "lesson":
        print(explain(exercise, args.depth) if args.depth else exercise.__doc__.strip())
    elif args.depth:
        raise LabError(f"{args.name} is a fault drill: it has one explanation (drop --depth)")
    else:
        print(exercise.__doc__.strip())
    return 0


def handle_run(args: argparse.Namespace) -> int:
    from lab.exercises.engine import run_drill

    exercise = exercises.load(args.name)
    if exercises.kind(exercise) == "lesson":
        return run_lesson_exercise(exercise, args)
    args.target_rank_chosen = args.target_rank is not None
    args.target_rank = exercise.DEFAULT_TARGET_RANK if args.target_rank is None else args.target_rank
    args.at_step = exercise.DEFAULT_AT_STEP if args.at_step is None else args.at_step
    world = exercise.topology(args).world_size
    if not 0 <= args.target_rank < world:
        raise LabError(f"--target-rank must be in [0, {world}) for {args.name}; got {args.target_rank}")
    if not 1 <= args.at_step < exercise.STEPS:
        raise LabError(f"--at-step must be in [1, {exercise.STEPS}) for {args.name}; got {args.at_step}")
    run_dir = run_dir_from_args(args)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    report_dir = Path(args.report_dir) if args.report_dir else run_dir.reports / f"{args.name}-{stamp}"

    def finish(report, drill):
        report.write(report_dir, drill.events())

    report = run_drill(exercise, args, run_dir, on_report=finish)
    report.summary()
    print(f"report: {report_dir / 'report.json'}, timeline: {report_dir / 'timeline.png'}")
    return 0 if report.verdict == "pass" else 1


def run_lesson_exercise(exercise, args: argparse.Namespace) -> int:
    if args.target_rank is not None or args.at_step is not None:
        raise LabError(f"{args.name} is a lesson exercise: --target-rank and --at-step are for fault drills")
    run_dir = run_dir_from_args(args)
    report_dir = Path(args.report_dir) if args.report_dir else \
        run_dir.reports / f"{args.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    report = run_lesson(exercise, args, run_dir)
    report.write(report_dir, [])
    report.summary()
    print(f"report: {report_dir / 'report.json'}")
    return 1 if report.verdict == "fail" else 0
