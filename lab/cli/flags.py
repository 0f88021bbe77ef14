"""The flags of the verbs that start a job (`lab up`, `lab run`): built from their declarations.

The topology's flags are declared in lab.options, each runtime's in its OPTIONS; this
module only puts them on a parser.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lab import output_paths, runtimes
from lab.options import DRY_RUN, RUN_DIR, TOPOLOGY, WORKER_START, Option, add_all
from lab.report import Report
from lab.rundir import RunDir

# The drills' flags (`lab exercise run` and `lab exercise matrix`).
TARGET_RANK = Option("--target-rank", "the rank the fault hits (default: the exercise's)", type=int)
AT_STEP = Option(
    "--at-step",
    "inject when the target rank reaches this step (default: the exercise's; on --script, 3)",
    type=int,
)
REPORT_DIR = Option("--report-dir", "where the report (or the matrix) goes (default: under the run dir)")


def add_run_dir_option(parser: argparse.ArgumentParser) -> None:
    RUN_DIR.add_to(parser)


def add_topology_options(parser: argparse.ArgumentParser, worker_start: str = "auto") -> None:
    group = parser.add_argument_group("topology")
    add_all(group, [o.but(default=worker_start) if o is WORKER_START else o for o in TOPOLOGY])
    runtimes.add_options(parser)
    DRY_RUN.add_to(parser)
    add_run_dir_option(parser)


def add_verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also show Ray's own notices (kept in the run dir's logs/)"
    )


def report_dir(args: argparse.Namespace, run_dir: RunDir) -> Path:
    """Where an exercise's report goes: --report-dir, else the run dir's reports/NAME-STAMP."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    chosen = output_paths.output_dir(args.report_dir, "--report-dir")  # "" or a link: one line
    return chosen if chosen is not None else run_dir.reports / f"{args.name}-{stamp}"


def write_report(report: Report, where: Path, run_dir: RunDir, events: list[dict]) -> None:
    run_dir.claim_for_report(where)
    report.write(where, events)
