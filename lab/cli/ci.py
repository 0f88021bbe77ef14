"""`lab ci --script PATH [--faults a,b] [--recovery STYLE] [--junit FILE] [--summary FILE] [--report-dir DIR] -- ARGS`

Your unmodified training script under the drills a project's own CI can afford: on loopback
(one node of --nproc-per-node processes, gloo; no root, no Docker, no network namespaces), the
fault-free reference, then each fault (default: kill-worker, hang-rank, rank-exception). It is `lab exercise
matrix` with those settings, plus what a CI reads: JUnit XML (--junit), the matrix as markdown
appended to the job summary (--summary, default $GITHUB_STEP_SUMMARY), the HTML page in the
report dir as an artefact. Exit 0 when every verdict passes, 1 otherwise. Everything is
checked before anything starts: a missing script, a report dir or JUnit folder it cannot
write is one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from lab import files, output_paths
from lab.bench import free_port
from lab.cli.exercise_script import FAULTS, refuse_early, register_matrix, script_faults
from lab.cli.flags import AT_STEP, REPORT_DIR, add_run_dir_option
from lab.errors import LabError
from lab.exercises.script import junit, matrix, spec
from lab.options import NPROC_PER_NODE, RDZV_PORT, RECOVERY, Option, add_all

DEFAULT_FAULTS = "kill-worker,hang-rank,rank-exception"  # also lab.pytest_plugin's default


JUNIT = Option("--junit", "write the verdicts as JUnit XML here", metavar="FILE")
SUMMARY = Option(
    "--summary",
    "append the matrix as markdown here (default: $GITHUB_STEP_SUMMARY, when set)",
    metavar="FILE",
)


def register(sub) -> None:
    parser = sub.add_parser("ci", help="the drills your CI runs on your script: JUnit XML, a summary, exit 1 on a fail")
    add_all(
        parser,
        (
            spec.SCRIPT.but(help="your training script, unmodified"),
            FAULTS.but(default=DEFAULT_FAULTS, help="the drills to run (default %(default)s)"),
            NPROC_PER_NODE.but(default=2, help="processes on the one loopback node (default %(default)s)"),
            RECOVERY,
            JUNIT,
            SUMMARY.but(default=os.environ.get("GITHUB_STEP_SUMMARY")),
            REPORT_DIR.but(default="lab-ci-report", help="the matrix and every run's report (default %(default)s)"),
            RDZV_PORT.but(default=None, help="the rendezvous store's port (default: a free one)"),
            *PASSED_ON,
        ),
    )
    parser.add_argument("script_args", nargs="*", metavar="-- ARGS", help="arguments for your script")
    add_run_dir_option(parser)
    parser.set_defaults(handler=handle)


# The knobs lab ci's own messages name, passed on to the drills as given (their defaults are the
# drills': lab exercise matrix --help).
PASSED_ON = (AT_STEP, spec.PROGRESS_REGEX, spec.AT_TIME, spec.DEADLINE, spec.CKPT_DIR)


def matrix_argv(args: argparse.Namespace) -> list[str]:
    argv = ["exercise", "matrix", "--script", args.script, "--faults", args.faults, "--hosts", "loopback"]
    argv += ["--nodes", "1", "--nproc-per-node", str(args.nproc_per_node), "--report-dir", args.report_dir]
    argv += ["--recovery", args.recovery, "--rdzv-port", str(args.rdzv_port or free_port())]
    for option in PASSED_ON:
        value = getattr(args, option.name)
        if value is not None:
            argv += [option.flag, str(value)]
    if args.run_dir:
        argv += ["--run-dir", args.run_dir]
    return [*argv, "--", *args.script_args]


def handle(args: argparse.Namespace) -> int:
    # An empty or unsafe output path is refused before anything runs (lab.output_paths).
    junit_file = output_paths.output_file(args.junit, "--junit")
    summary_file = output_paths.output_file(args.summary, "--summary")
    report_dir = output_paths.output_dir(args.report_dir, "--report-dir") or Path("lab-ci-report")
    if not args.script:
        raise LabError("lab ci needs --script PATH (your training script)")
    if not Path(args.script).is_file():
        raise LabError(f"script not found: {args.script}")
    verbs = argparse.ArgumentParser(prog="lab ci").add_subparsers()
    register_matrix(verbs)  # `lab exercise matrix`, as its own parser reads this argv
    drills = verbs.choices["matrix"].parse_args(matrix_argv(args)[2:])
    refuse_early(drills, script_faults(args.faults))  # every refusal here, before any folder is made
    report_dir.mkdir(parents=True, exist_ok=True)  # made last: a refusal above leaves nothing
    code = drills.handler(drills)
    record = json.loads(files.read_regular(report_dir / "matrix.json", 64 << 20) or b"{}")
    if not record.get("rows"):
        raise LabError(f"the matrix wrote no matrix.json in {report_dir}: see the output above")
    if junit_file:
        files.write_text(junit_file, junit.junit_xml(record))
        print(f"junit: {junit_file}")
    if summary_file:
        output_paths.append_text(summary_file, matrix.markdown(record) + "\n")
        print(f"summary appended to {summary_file}")
    for row in record["rows"]:  # why it failed, last, where a CI log's reader looks first
        if row["verdict"] not in ("pass", "not run"):  # the faults not run are in the reports: the cause is not
            print(f"lab ci: {row['fault']}: {row['verdict']}: {row['finding']}", file=sys.stderr)
    return int(code)
