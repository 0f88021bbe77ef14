"""`lab doctor`: what would stop a multi-node job on these hosts, named in seconds, before a job
hangs on it. The hosts are brought up as `lab up` would bring them, probed and torn down."""

from __future__ import annotations

import argparse

from lab import runtimes
from lab.cli.flags import add_run_dir_option
from lab.doctor.examine import examine
from lab.errors import LabError
from lab.options import BACKEND, NODES, NPROC_PER_NODE, RDZV_PORT, add_all, given, run_dir_from_args
from lab.runtimes.monitored import MONITORING
from lab.topology import Topology

HEALTHY = "nothing wrong: every node resolves itself and the rendezvous, and reaches every other node"


def register(sub) -> None:
    parser = sub.add_parser("doctor", help="check the hosts for what would stop a multi-node job, in seconds")
    group = parser.add_argument_group("topology")
    add_all(group, [NODES, NPROC_PER_NODE, BACKEND, RDZV_PORT.but(help="the rendezvous port to check (%(default)s)")])
    runtimes.add_options(parser)
    add_run_dir_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if MONITORING.name in given(args) and getattr(args, MONITORING.name) != "off":
        raise LabError("lab doctor starts no Prometheus: drop --prometheus (lab up runs it)")
    setattr(args, MONITORING.name, "off")
    runtime = runtimes.from_args(args, run_dir_from_args(args))
    if not runtime.DOCTOR:
        proven = sorted(name for name, cls in runtimes.registry().items() if cls.DOCTOR)
        raise LabError(
            f"lab doctor does not probe {runtime.name} nodes yet, only {', '.join(proven)} ones: "
            f"use --runtime {' or '.join(proven)}"
        )
    topology = Topology(
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        backend=args.backend,
        rdzv_port=args.rdzv_port,
        agent_metrics_port=0,
        rank_metrics_port=0,
    )
    exam = examine(runtime, topology)
    for finding in exam.found:
        print(finding.line())
    wrong = [f for f in exam.found if not f.note]
    print(HEALTHY if not wrong else f"{len(wrong)} finding(s)", f"({exam.seconds:.1f} s)")
    return 0 if not wrong else 1
