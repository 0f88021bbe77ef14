"""`lab up`: bring the lab's hosts up and run the lesson's DDP job across them."""

from __future__ import annotations

import argparse

from lab import job, results
from lab.cli.flags import add_topology_options
from lab.cli.starting import start
from lab.doctor import after_failure
from lab.health import prometheus
from lab.node.restart_budget import CRASH_LOOP_EXIT
from lab.runtimes import state as runstate
from lab.why import card as why
from lab.workloads import script_path

WORKLOADS = ("ddp_train", "trainer", "broadcast_demo")


def register(sub) -> None:
    parser = sub.add_parser("up", help="start the lab and run the lesson's 2-node DDP job")
    add_topology_options(parser)
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="ddp_train",
        help="what the ranks run (default: the lesson's ddp_train)",
    )
    parser.add_argument(
        "--detach", action="store_true", help="return once the job is started; watch it with `lab status`"
    )
    parser.add_argument(
        "workload_args",
        nargs=argparse.REMAINDER,
        help="arguments for the workload after --, e.g. -- --steps 500 --step-time 0.1",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    workload_args = args.workload_args[1:] if args.workload_args[:1] == ["--"] else args.workload_args
    started = start(args, script_path(args.workload), workload_args)
    if started is None:
        return 0
    runtime, topology, nodes = started
    state = runstate.load(runtime.run_dir)
    if state and state.prometheus:
        print(f"Prometheus: {state.prometheus} (try lab_steps_total, or `lab status --watch`)")
        print(f"live view: {state.prometheus}/{prometheus.LIVE_PAGE}")
    if args.detach:
        print("the job runs in the background: `lab status` to watch it, `lab down` to stop it")
        return 0
    finished = False
    try:
        codes = job.wait(nodes, job.LogFollower(nodes), failure_grace_s=job.failure_grace_s(topology))
        finished = True
    finally:
        if not finished:  # interrupted: leave nothing running behind
            runtime.down(grace_s=5.0)
    ranks = results.collect(nodes)
    ok, line = results.verdict(ranks, topology.world_size)
    print()
    if ranks:
        print(results.table(ranks))
    print(line)
    if job.job_status(codes):
        print(f"job failed: node exit codes {codes}")
        card = why.card(runtime.run_dir.path)
        after_failure.diagnose(args, runtime.run_dir.path, topology, card)
        print(card.text(), end="")
    print("the lab's hosts stay up for inspection: `lab status`, then `lab down`")
    status = job.job_status(codes)
    return status if status == CRASH_LOOP_EXIT else 0 if ok and status == 0 else 1
