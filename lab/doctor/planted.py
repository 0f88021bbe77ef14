"""One misconfiguration planted twice on node 1 of two hosts (lab.runtimes.misconfig): under
`lab doctor`, and under the lesson's job as a first run meets it (2 x 2 ddp_train, torchrun's
c10d rendezvous and its own defaults, no restart), bounded. `lab bench doctor` tabulates both
for every misconfiguration; `lab exercise run NAME` (lab.doctor.drills) shows and judges one.

Each takes the run dir the hosts come up in, as every lab command does: a lab running there is
refused, not torn down, and the hosts go down on the way out, whatever happened.
"""

from __future__ import annotations

import re
import time
from contextlib import ExitStack

from lab import files, runtimes
from lab.doctor.examine import examine, hosts_up
from lab.options import Option
from lab.rundir import RunDir
from lab.runtimes.misconfig import Misconfig
from lab.runtimes.ports import free_port
from lab.topology import Topology

PLANTED_ON = 1
BOUND = Option("--bound", "seconds the job is given before it is called hung (default %(default)s)", 90.0, float)
RAISED = re.compile(r"^\s*\w+(Error|Exception): ")  # the first exception a rank raised
ERROR = re.compile(r"error|timed out|timeout|refused|failed", re.I)
NOISE = re.compile(r"^\s*frame #|\[lab\.node\.launch\]")  # a C++ stack frame; the lab's own settings


def _runtime(misconfig: Misconfig, run_dir: RunDir, runtime: str):
    misconfig.planter(runtime)  # one that cannot be planted there says so before anything starts
    return runtimes.create(runtime, run_dir, log=lambda line: None, monitoring="off", **misconfig.hosts_for(runtime))


def _topology(**changes) -> Topology:
    return Topology(
        nodes=2, nproc_per_node=2, rdzv_port=free_port(), agent_metrics_port=0, rank_metrics_port=0, **changes
    )


def _seed(misconfig: Misconfig, undo: ExitStack, runtime: str):
    """What plants the misconfiguration on node PLANTED_ON once the hosts are up (examine's seed)."""
    return lambda _, plan: misconfig.planter(runtime)(plan, PLANTED_ON, undo)


def doctor_row(misconfig: Misconfig, run_dir: RunDir, runtime: str = "local") -> dict:
    """`lab doctor` on planted hosts: its seconds (hosts up and down included), and its finding
    about the node the misconfiguration blames, if it made one in the misconfiguration's words."""
    with ExitStack() as undo:
        exam = examine(
            _runtime(misconfig, run_dir, runtime), _topology(), lambda line: None, _seed(misconfig, undo, runtime)
        )
    blamed = misconfig.blamed(PLANTED_ON, 2)
    named = [f.line() for f in exam.found if f.node == blamed and misconfig.says in f.line()]
    return {"doctor_s": round(exam.seconds, 2), "named": bool(named), "finding": named[0] if named else ""}


def job_row(misconfig: Misconfig, run_dir: RunDir, bound_s: float, runtime: str = "local") -> dict:
    """The lesson's job on freshly planted hosts, as `lab up --recovery torchrun --torch-defaults`
    runs it: how it ended (passed, failed, or hung at bound_s), after how long, and what it said."""
    with ExitStack() as undo:
        hosts = _runtime(misconfig, run_dir, runtime)
        topology = _topology(rdzv_backend="c10d", torch_defaults=True, max_restarts=0)
        with hosts_up(hosts, topology, lambda line: None, _seed(misconfig, undo, runtime)) as (plan, _):
            started = time.monotonic()
            hosts.start_nodes(plan)
            while any(n.exit_code() is None for n in plan.nodes) and time.monotonic() - started < bound_s:
                time.sleep(0.2)
            seconds = time.monotonic() - started
            codes = {n.name: n.exit_code() for n in plan.nodes}
            said = [line for n in plan.nodes for line in (files.read_text(n.log_path, 1 << 20) or "").splitlines()]
    raised = [line.strip() for line in said if RAISED.search(line)]
    errors = raised[:1] or [line.strip() for line in said if ERROR.search(line) and not NOISE.search(line)]
    ended = "hung" if any(c is None for c in codes.values()) else "passed" if set(codes.values()) == {0} else "failed"
    return {"job": ended, "job_s": round(seconds, 1), "codes": codes, "error": errors[-1][:200] if errors else ""}
