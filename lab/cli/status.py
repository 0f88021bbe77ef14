"""`lab status`: what the lab runs now, read from the run directory (works from any shell)."""

from __future__ import annotations

import argparse

from lab import runtimes
from lab.cli.options import add_run_dir_option, run_dir_from_args


def register(sub) -> None:
    parser = sub.add_parser("status", help="show the lab's nodes and whether they run (exit 3: no lab)")
    add_run_dir_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    run_dir = run_dir_from_args(args)
    state = run_dir.read_state()
    if state is None:
        print("no lab is running")
        return 3
    topo = state["topology"]
    print(f"runtime {state['runtime']} ({state['hosts']} hosts), {topo['nodes']} nodes x "
          f"{topo['nproc_per_node']} workers, {topo['backend']}, rendezvous "
          f"{topo['rdzv_backend']} at {topo['rdzv_host']}:{topo['rdzv_port']}")
    print(f"script {state['script']} {' '.join(state['script_args'])}".rstrip())
    for node in runtimes.create(state["runtime"], run_dir).attach():
        code = node.exit_code()
        what = "running" if code is None else f"exited {code}"
        print(f"  {node.name:<6} {node.address:<15} pid {node.pid}  {what:<10} log {node.log_path}")
    return 0
