"""`lab exercise list | explain NAME | run NAME`: fault drills and the lesson's claims, judged.

Three kinds share these commands: fault drills (lab.exercises: break a running job on
purpose), lesson exercises (lab.lessons: run small jobs side by side and compare) and
misconfigurations (lab.doctor.drills: plant one, run the job, then the doctor).
`lab exercise run NAME --help` lists what NAME takes: a drill's own flags, and the flags
of every runtime that drills run on.
"""

from __future__ import annotations

import argparse
from types import ModuleType

from lab import exercises, runtimes
from lab.cli import exercise_misconfig, exercise_script
from lab.cli.flags import AT_STEP, REPORT_DIR, TARGET_RANK, add_run_dir_option, add_verbose, report_dir, write_report
from lab.errors import LabError
from lab.exercises.script import spec
from lab.lessons.runner import DEPTHS, explain, run_lesson
from lab.options import PARALLEL_OPTION, RECOVERY, TORCH_DEFAULTS, add_all, run_dir_from_args
from lab.report import Report
from lab.runtimes.local import HOSTS


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("exercise", help="fault drills and lesson exercises, judged with a verdict")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=type(parser))
    verbs.add_parser("list", help="list the exercises").set_defaults(handler=handle_list)
    verbs.add_parser(
        "grid", help="which drill runs on which runtime, on the lab's trainer and on your script, and why not"
    ).set_defaults(handler=handle_grid)
    explain_parser = verbs.add_parser("explain", help="the hypothesis, the command and what to watch")
    explain_parser.add_argument("name")
    explain_parser.add_argument(
        "--depth", choices=DEPTHS, help="lesson exercises: the explanation for a beginner, a developer or a researcher"
    )
    explain_parser.set_defaults(handler=handle_explain)
    run = verbs.add_parser("run", help="run one exercise; exit 0 on pass, 1 on fail")
    names = run.add_subparsers(dest="name", required=True, metavar="NAME", parser_class=type(parser))
    for name, module in exercises.all_exercises().items():
        add_exercise_parser(names, name, module)
    exercise_misconfig.add_parsers(names)
    exercise_script.register_matrix(verbs)


def add_exercise_parser(names: argparse._SubParsersAction, name: str, module: ModuleType) -> None:
    parser = names.add_parser(name, help=module.SUMMARY, description=module.SUMMARY)
    if exercises.kind(module) == "lesson":
        # Lessons run whole small jobs on the local runtime's hosts; the fault flags are taken to
        # refuse them in words (they are for drills).
        add_all(parser, (HOSTS, TARGET_RANK, AT_STEP, PARALLEL_OPTION))
        parser.set_defaults(handler=handle_lesson, exercise=module)
    else:
        own = exercises.own_options(module)
        add_all(parser, (TARGET_RANK, AT_STEP, *spec.SCRIPT_TOPOLOGY, TORCH_DEFAULTS, RECOVERY, PARALLEL_OPTION))
        add_all(parser, own, recorded=True)  # refused on a script where it acts on the trainer alone, at any value
        # Every drill takes --script: one without a script side refuses it in words (NO_SCRIPT).
        exercise_script.add_script_options(parser, job_size=False)
        runtimes.add_options(parser, drills_only=True, default="local")
        add_verbose(parser)
        # A drill needs no Prometheus unless its verdict reads it.
        parser.set_defaults(
            handler=handle_drill,
            exercise=module,
            monitoring="on" if getattr(module, "NEEDS_PROMETHEUS", False) else "off",
        )
    REPORT_DIR.add_to(parser)
    add_run_dir_option(parser)


def handle_grid(args: argparse.Namespace) -> int:
    from lab.exercises import grid

    print(grid.markdown(), end="")
    return 0


def handle_list(args: argparse.Namespace) -> int:
    found = exercises.all_exercises()
    for title, kind in (("fault drills", "drill"), ("lesson exercises (see the README's learning path)", "lesson")):
        print(f"{title}:")
        for name, module in found.items():
            if exercises.kind(module) == kind:
                print(f"  {name:<26} {module.SUMMARY}")
    print("misconfigurations of a first multi-node run (docs/doctor.md):")
    print("\n".join(exercise_misconfig.listed()))
    return 0


def handle_explain(args: argparse.Namespace) -> int:
    misconfig = exercise_misconfig.explanation(args.name, args.depth)
    if misconfig is not None:
        print(misconfig)
        return 0
    exercise = exercises.load(args.name)
    if exercises.kind(exercise) == "lesson":
        print(explain(exercise, args.depth) if args.depth else (exercise.__doc__ or "").strip())
    elif args.depth:
        raise LabError(f"{args.name} is a fault drill: it has one explanation (drop --depth)")
    else:
        print((exercise.__doc__ or "").strip())
    return 0


def handle_drill(args: argparse.Namespace) -> int:
    from lab.exercises.drill import Drill
    from lab.exercises.engine import run_drill

    run_dir = run_dir_from_args(args)
    where = report_dir(args, run_dir)
    if getattr(args, "script", None):
        if args.parallel != PARALLEL_OPTION.default:
            raise LabError("--parallel is the lab trainer's: your script parallelises as it does itself; drop it")
        return exercise_script.handle_script_drill(args, where)
    exercise_script.refuse_script_flags(args)
    options = exercises.options_from_args(args.exercise, args)
    runtime = runtimes.from_args(args, run_dir, shared=runtimes.DRILL_FLAGS)

    def finish(report: Report, drill: Drill) -> None:
        write_report(report, where, run_dir, drill.events())

    report = run_drill(
        args.exercise, options, runtime, ray_address=args.ray_address, on_report=finish, verbose=args.verbose
    )
    report.summary()
    print(f"report: {where / 'report.json'}, timeline: {where / 'timeline.png'}")
    return 0 if report.verdict == "pass" else 1


def handle_lesson(args: argparse.Namespace) -> int:
    if args.target_rank is not None or args.at_step is not None:
        raise LabError(f"{args.name} is a lesson exercise: --target-rank and --at-step are for fault drills")
    if args.parallel != PARALLEL_OPTION.default:
        raise LabError(
            f"{args.name} is a lesson exercise: it runs its own scripts; --parallel is for drills on the trainer"
        )
    run_dir = run_dir_from_args(args)
    where = report_dir(args, run_dir)
    report = run_lesson(args.exercise, args.hosts, run_dir)
    write_report(report, where, run_dir, [])
    report.summary()
    print(f"report: {where / 'report.json'}")
    return 1 if report.verdict == "fail" else 0
