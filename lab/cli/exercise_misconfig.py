"""`lab exercise run NAME` for a misconfiguration (lab.doctor.drills): its parser, its line in
`lab exercise list`, its explanation, and its run (on the run dir, as every exercise's)."""

from __future__ import annotations

import argparse

from lab import runtimes
from lab.cli.flags import REPORT_DIR, add_run_dir_option, report_dir, write_report
from lab.doctor import drills
from lab.errors import LabError
from lab.options import run_dir_from_args
from lab.runtimes.misconfig import PLANTED_ON_RUNTIMES


def add_parsers(names: argparse._SubParsersAction) -> None:
    for name, drill in drills.drills().items():
        parser = names.add_parser(name, help=drill.SUMMARY, description=drill.SUMMARY)
        drills.BOUND.add_to(parser)
        runtimes.add_runtime_flag(parser, PLANTED_ON_RUNTIMES, "local")
        REPORT_DIR.add_to(parser)
        add_run_dir_option(parser)
        parser.set_defaults(handler=handle, drill=drill)


def listed() -> list[str]:
    return [f"  {name:<26} {drill.SUMMARY}" for name, drill in drills.drills().items()]


def explanation(name: str, depth: str | None) -> str | None:
    """What `lab exercise explain NAME` prints for a misconfiguration; None: NAME is none."""
    drill = drills.drills().get(name)
    if drill is None:
        return None
    if depth:
        raise LabError(f"{name} is a misconfiguration drill: it has one explanation (drop --depth)")
    return drill.explanation()


def handle(args: argparse.Namespace) -> int:
    if args.bound <= 0:
        raise LabError(f"--bound must be above 0 seconds, got {args.bound:g}")
    run_dir = run_dir_from_args(args)
    where = report_dir(args, run_dir)
    report = drills.run(args.drill, run_dir, args.bound, runtime=args.runtime)
    write_report(report, where, run_dir, [])
    report.summary()
    print(f"report: {where / 'report.json'}")
    return 0 if report.verdict == "pass" else 1
