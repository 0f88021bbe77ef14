"""`lab run SCRIPT [ARGS...]`: any script across the lab's nodes; output streamed, exit status the job's."""

from __future__ import annotations

import argparse

from lab import job
from lab.cli.options import add_topology_options
from lab.cli.starting import start


def register(sub) -> None:
    parser = sub.add_parser("run", help="run any script across the lab's nodes, then take the lab down")
    # Any script: torchrun's own worker start by default, a fresh interpreter per worker, as
    # bare torchrun runs it (--worker-start preload is there to ask for the lab's).
    add_topology_options(parser, worker_start="spawn")
    parser.add_argument("script", help="the training script, as you would give it to torchrun")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    started = start(args, args.script, args.script_args)
    if started is None:
        return 0
    runtime, topology, nodes = started
    try:
        codes = job.wait(nodes, job.LogFollower(nodes), failure_grace_s=job.failure_grace_s(topology))
    finally:
        runtime.down(grace_s=5.0)
    status = job.job_status(codes)
    print(f"job {'succeeded' if status == 0 else 'failed'}: node exit codes {codes}")
    return status
