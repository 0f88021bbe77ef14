"""`lab bench doctor`: what torchrun does with each misconfiguration, beside what `lab doctor` says

    lab bench doctor [--misconfigs a,b,...] [--bound 90]

Each misconfiguration of lab.runtimes.misconfig is planted on node 1 of two hosts (netns, or
loopback for a port), twice: under `lab doctor` (its findings and its seconds, hosts up and down
included), and under the lesson's job as a first run meets it (2 x 2 ddp_train, torchrun's c10d
rendezvous, torchrun's own defaults, no restart): how the job ended, after how long, bounded by
--bound, and what it said: the first exception a rank raised, else its nodes' last error line.
"""

from __future__ import annotations

import re
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from lab import files, runtimes
from lab.bench.diagnosis import listed
from lab.bench.result import BenchResult, goal_line, this_command
from lab.doctor.examine import examine, hosts_up
from lab.job_text import markdown_cell
from lab.options import Option
from lab.rundir import RunDir
from lab.runtimes.misconfig import MISCONFIGS, Misconfig
from lab.runtimes.ports import free_port
from lab.topology import Topology

PLANTED_ON = 1
DOCTOR_GOAL_S = 5.0
WHICH = Option("--misconfigs", f"comma-separated, of: {', '.join(MISCONFIGS)} (default: all)", "")
BOUND = Option("--bound", "seconds a job is given before it is called hung (default %(default)s)", 90.0, float)
RAISED = re.compile(r"^\s*\w+(Error|Exception): ")  # the first exception a rank raised
ERROR = re.compile(r"error|timed out|timeout|refused|failed", re.I)
NOISE = re.compile(r"^\s*frame #|\[lab\.node\.launch\]")  # a C++ stack frame; the lab's own settings


def add_arguments(p) -> None:
    WHICH.add_to(p)
    BOUND.add_to(p)


def _runtime(misconfig: Misconfig, top: Path):
    hosts = misconfig.hosts[0]
    return runtimes.create("local", RunDir(top / "run"), log=lambda line: None, hosts=hosts, monitoring="off")


def _topology(**changes) -> Topology:
    return Topology(
        nodes=2, nproc_per_node=2, rdzv_port=free_port(), agent_metrics_port=0, rank_metrics_port=0, **changes
    )


def _seed(misconfig: Misconfig, undo: ExitStack):
    """What plants the misconfiguration on node PLANTED_ON once the hosts are up (examine's seed)."""
    return lambda _, plan: misconfig.plant(plan, PLANTED_ON, undo)


def doctor_row(misconfig: Misconfig) -> dict:
    with tempfile.TemporaryDirectory(prefix="tlab-bench-doctor-") as top, ExitStack() as undo:
        exam = examine(
            _runtime(misconfig, Path(top)),
            _topology(),
            lambda line: None,
            _seed(misconfig, undo),
        )
    blamed = misconfig.blamed(PLANTED_ON, 2)
    named = [f.line() for f in exam.found if f.node == blamed and misconfig.says in f.line()]
    return {"doctor_s": round(exam.seconds, 2), "named": bool(named), "finding": named[0] if named else ""}


def job_row(misconfig: Misconfig, bound_s: float) -> dict:
    """The lesson's job on freshly planted hosts, as `lab up --recovery torchrun --torch-defaults` runs it."""
    with tempfile.TemporaryDirectory(prefix="tlab-bench-doctor-") as top, ExitStack() as undo:
        runtime = _runtime(misconfig, Path(top))
        topology = _topology(rdzv_backend="c10d", torch_defaults=True, max_restarts=0)
        with hosts_up(runtime, topology, lambda line: None, _seed(misconfig, undo)) as (plan, _):
            started = time.monotonic()
            runtime.start_nodes(plan)
            while any(n.exit_code() is None for n in plan.nodes) and time.monotonic() - started < bound_s:
                time.sleep(0.2)
            seconds = time.monotonic() - started
            codes = {n.name: n.exit_code() for n in plan.nodes}
            said = [line for n in plan.nodes for line in (files.read_text(n.log_path, 1 << 20) or "").splitlines()]
    raised = [line.strip() for line in said if RAISED.search(line)]
    errors = raised[:1] or [line.strip() for line in said if ERROR.search(line) and not NOISE.search(line)]
    ended = "hung" if any(c is None for c in codes.values()) else "passed" if set(codes.values()) == {0} else "failed"
    return {"job": ended, "job_s": round(seconds, 1), "codes": codes, "error": errors[-1][:200] if errors else ""}


def run(args, out_dir: Path) -> BenchResult:
    chosen = listed("--misconfigs", tuple(MISCONFIGS))(args.misconfigs or ",".join(MISCONFIGS))
    rows = {}
    for name in chosen:
        misconfig = MISCONFIGS[name]
        print(f"{name}: lab doctor ...", flush=True)
        rows[name] = doctor_row(misconfig)
        print(f"{name}: the job, bounded at {args.bound:g} s ...", flush=True)
        rows[name].update(job_row(misconfig, args.bound))
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
