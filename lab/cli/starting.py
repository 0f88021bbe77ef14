"""Bringing a job up, shared by `lab up` and `lab run`: check, plan or start, and clean up on failure."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from lab import recovery, runtimes
from lab.options import run_dir_from_args, topology_from_args
from lab.runtimes.base import Log, Node, Runtime
from lab.topology import Topology


def start(
    args: argparse.Namespace, script: str, script_args: list[str], log: Log = print
) -> tuple[Runtime, Topology, Sequence[Node]] | None:
    """Start the job; returns (runtime, topology, nodes), or None after a dry run."""
    runtime = runtimes.from_args(args, run_dir_from_args(args), log=log)
    host = runtime.job_rendezvous()
    # A script recovers in-process only when it trains in lab.inprocess's attempts(): auto picks it
    # then (the fastest style; a hang it cannot end falls back to a restart: docs/recovery.md).
    # Located and read only where in-process may run, so other styles' refusals still come first.
    maybe = args.recovery == recovery.IN_PROCESS or (args.recovery == recovery.AUTO and not host.no_in_process)
    located = runtime.locate_script(script) if maybe else None
    refusal = recovery.script_refuses_in_process(located) if located else recovery.IN_PROCESS_UNSAID
    topology, how = recovery.choose(
        topology_from_args(args),
        args.recovery,
        host,
        rdzv_asked=args.rdzv_backend,
        in_process_refusal=refusal,
        in_process_first=True,
    )
    script = located or runtime.locate_script(script)
    if args.dry_run:
        print(f"# {how.line()}")
        print(runtime.plan(topology, script, script_args).text(), end="")  # the plan `up` would run
        return None
    log(how.line())
    runtimes.begin_job(runtime, log)
    try:
        topology, nodes = runtime.up(topology, script, script_args)
    except BaseException:
        runtime.down(grace_s=2.0)
        raise
    for node in nodes:
        log(
            f"started {node.name} at {node.address} ({runtime.describe(node)}), {topology.nproc_per_node} "
            f"workers; log {node.log_path}"
        )
    return runtime, topology, nodes
