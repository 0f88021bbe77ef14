"""`lab bench doctor`: what torchrun does with each misconfiguration, beside what `lab doctor` says

    lab bench doctor [--misconfigs a,b,...] [--bound 90]

Each misconfiguration of lab.runtimes.misconfig is planted on node 1 of two hosts (netns, or
loopback for a port), twice: under `lab doctor` (its findings and its seconds, hosts up and down
included), and under the lesson's job as a first run meets it (2 x 2 ddp_train, torchrun's c10d
rendezvous, torchrun's own defaults, no restart): how the job ended, after how long, bounded by
--bound, and what it said: the first exception a rank raised, else its nodes' last error line.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from lab.bench.diagnosis import listed
from lab.bench.result import BenchResult, goal_line, this_command
from lab.doctor.planted import BOUND, PLANTED_ON, doctor_row, job_row
from lab.job_text import markdown_cell
from lab.options import Option
from lab.rundir import RunDir
from lab.runtimes.misconfig import MISCONFIGS

DOCTOR_GOAL_S = 5.0
WHICH = Option("--misconfigs", f"comma-separated, of: {', '.join(MISCONFIGS)} (default: all)", "")


def add_arguments(p) -> None:
    WHICH.add_to(p)
    BOUND.add_to(p)


def run(args, out_dir: Path) -> BenchResult:
    chosen = listed("--misconfigs", tuple(MISCONFIGS))(args.misconfigs or ",".join(MISCONFIGS))
    rows = {}
    for name in chosen:
        misconfig = MISCONFIGS[name]
        print(f"{name}: lab doctor ...", flush=True)
        with tempfile.TemporaryDirectory(prefix="tlab-bench-doctor-") as top:
            rows[name] = doctor_row(misconfig, RunDir(Path(top) / "run"))
        print(f"{name}: the job, bounded at {args.bound:g} s ...", flush=True)
        with tempfile.TemporaryDirectory(prefix="tlab-bench-doctor-") as top:
            rows[name].update(job_row(misconfig, RunDir(Path(top) / "run"), args.bound))
    return BenchResult("doctor", this_command(), markdown(rows, args.bound), figures={"rows": rows})


def markdown(rows: dict, bound_s: float) -> list[str]:
    lines = [
        f"Each planted on node {PLANTED_ON} of 2 netns hosts (loopback ones for a port). The job: the lesson's "
        f"2 x 2 ddp_train with torchrun's c10d rendezvous and its own defaults, called hung at {bound_s:g} s.",
        "",
        "| misconfiguration | the job | after | what it said | `lab doctor` | in |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        job = r["job"] if r["job"] != "hung" else f"hung (still running at {bound_s:g} s)"
        doctor = "named" if r["named"] else "**missed**"
        error = markdown_cell(r["error"] or "-")
        lines.append(f"| {name} | {job} | {r['job_s']} s | {error} | {doctor} | {r['doctor_s']} s |")
    named = [r for r in rows.values() if r["named"] and r["doctor_s"] < DOCTOR_GOAL_S]
    lines += [
        "",
        goal_line(
            f"every misconfiguration named by `lab doctor` in under {DOCTOR_GOAL_S:g} s",
            len(named) == len(rows),
            f"{len(named)} of {len(rows)}",
        ),
    ]
    return lines
