"""`lab down`: stop and remove everything the lab started, also after a crash."""

from __future__ import annotations

import argparse

from lab import runtimes
from lab.cli.flags import add_run_dir_option
from lab.options import run_dir_from_args


def register(sub) -> None:
    parser = sub.add_parser("down", help="stop every process and remove every host the lab made")
    add_run_dir_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    run_dir = run_dir_from_args(args)
    removed = runtimes.for_run_dir(run_dir).down()
    if not removed:
        print("nothing to stop: no lab is running")
        return 0
    for item in removed:
        print(f"removed {item}")
    return 0
