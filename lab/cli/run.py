"""`lab run SCRIPT [ARGS...]`: any script across the lab's nodes; output streamed, exit status the job's."""

from __future__ import annotations

import argparse

from lab import job
from lab.cli import why as why_cli
from lab.cli.flags import add_topology_options
from lab.cli.starting import start
from lab.doctor import after_failure
from lab.why import card as why


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
        status = job.job_status(codes)
        if status:  # the card before the run dir goes: it keeps the story, the logs are gone after down
            card = why.card(runtime.run_dir.path)
            after_failure.diagnose(args, runtime.run_dir.path, topology, card)
            print(f"\n{card.text()}", end="", flush=True)  # shown first: a full disk must not hide it
            print(f"({why_cli.save_or_say(runtime.run_dir, card)})")
    finally:
        runtime.down(grace_s=5.0)
    print(f"job {'succeeded' if status == 0 else 'failed'}: node exit codes {codes}")
    return status
