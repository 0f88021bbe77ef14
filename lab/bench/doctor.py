"""`lab bench doctor`: what torchrun does with each misconfiguration, beside what `lab doctor` says

    lab bench doctor [--misconfigs a,b,...] [--bound 90] [--runtime local|docker]

Each misconfiguration of lab.runtimes.misconfig is planted on node 1 of two hosts (netns, or
loopback for a port; with --runtime docker, two containers, those that can be planted there:
the others are listed with why not), twice: under `lab doctor` (its findings and its seconds, hosts up and down
included), and under the lesson's job as a first run meets it (2 x 2 ddp_train, torchrun's c10d
rendezvous, torchrun's own defaults, no restart): how the job ended, after how long, bounded by
--bound, and what it said: the first exception a rank raised, else its nodes' last error line.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from lab import runtimes
from lab.bench.diagnosis import listed
from lab.bench.result import BenchResult, goal_line, this_command
from lab.doctor.planted import BOUND, PLANTED_ON, doctor_row, job_row
from lab.errors import LabError
from lab.job_text import markdown_cell
from lab.options import Option
from lab.rundir import RunDir
from lab.runtimes.misconfig import HOSTS_OF, MISCONFIGS, PLANTED_ON_RUNTIMES

DOCTOR_GOAL_S = 5.0
WHICH = Option("--misconfigs", f"comma-separated, of: {', '.join(MISCONFIGS)} (default: all)", "")


def add_arguments(p) -> None:
    WHICH.add_to(p)
    BOUND.add_to(p)
    runtimes.add_runtime_flag(p, PLANTED_ON_RUNTIMES, "local")


def sections() -> list[str]:
    return [_section(runtime) for runtime in PLANTED_ON_RUNTIMES]


def _section(runtime: str) -> str:
    return "doctor" if runtime == PLANTED_ON_RUNTIMES[0] else f"doctor-{runtime}"  # the first: the published one


def run(args, out_dir: Path) -> BenchResult:
    chosen = listed("--misconfigs", tuple(MISCONFIGS))(args.misconfigs or ",".join(MISCONFIGS))
    refused = _refused(chosen, args.runtime, named=bool(args.misconfigs))
    rows = {}
    for name in (n for n in chosen if n not in refused):
        misconfig = MISCONFIGS[name]
        print(f"{name}: lab doctor ...", flush=True)
        with tempfile.TemporaryDirectory(prefix="tlab-bench-doctor-") as top:
            rows[name] = doctor_row(misconfig, RunDir(Path(top) / "run"), args.runtime)
        print(f"{name}: the job, bounded at {args.bound:g} s ...", flush=True)
        with tempfile.TemporaryDirectory(prefix="tlab-bench-doctor-") as top:
            rows[name].update(job_row(misconfig, RunDir(Path(top) / "run"), args.bound, args.runtime))
    body = markdown(rows, args.bound, args.runtime) + [f"- Not planted here: {why}" for why in refused.values()]
    return BenchResult(_section(args.runtime), this_command(), body, figures={"rows": rows, "refused": refused})


def _refused(chosen: list[str], runtime: str, named: bool) -> dict[str, str]:
    """Those that cannot be planted on the runtime, with why; one named in --misconfigs is refused
    in one line before anything runs."""
    refused = {}
    for name in chosen:
        try:
            MISCONFIGS[name].planter(runtime)
        except LabError as e:
            if named:
                raise
            refused[name] = str(e)
    return refused


def markdown(rows: dict, bound_s: float, runtime: str = "local") -> list[str]:
    lines = [
        f"Each planted on node {PLANTED_ON} of 2 {HOSTS_OF[runtime]}. The job: the lesson's "
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
