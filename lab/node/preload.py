"""Preloaded workers: torchrun's forked workers, started with torch already imported.

torchrun runs a --run-path script in a process forked from a multiprocessing fork server
when --start-method=forkserver. `lab.node.launch --preload-workers` has the agent fork
that server from itself before it starts torchrun (lab/node/fork_server.py), once it has
imported torch and what a DDP trainer pulls in lazily. torch is imported once per node,
and every worker, first or restarted, is forked with all of it loaded. The server outlives
restarts, so a restarted worker starts in a fifth of a second instead of seconds. Measured
in docs/benchmarks.md (startup) and docs/exercises.md (Measured).
"""

from __future__ import annotations

import argparse
import os
import sys

from lab.node.fork_server import forget_start_method, fork_server_here
from lab.topology import WATCHER

# What the fork server imports once per node, so that its workers start with it loaded:
# torch itself, and what a DDP trainer imports lazily on its first steps (torch._dynamo
# alone is about a second, imported by the optimizer's first step).
PRELOAD_MODULES = [
    "torch",
    "torch.distributed",
    "torch.nn.parallel",
    "torch.optim",
    "torch._dynamo",
    "torch.utils.data",
    "numpy",
]


def before_torch(torchrun_argv: list[str]) -> None:
    """What must be set before the agent (or the in-process keeper, whose flags name
    --nproc-per-node too) imports torch, which its forked server and workers inherit: OpenMP
    reads OMP_NUM_THREADS once, when torch loads. Set it as torchrun would a moment later (1
    for more than one worker per node, unless the user chose). Without it a keeper's ranks
    each ran an OpenMP thread per core, spinning after each parallel region: 18% of a core per
    rank at 10 paced steps a second on 2 cores, against 8% with one thread."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--nproc-per-node", "--nproc_per_node", default="1")
    nproc, _ = parser.parse_known_args(torchrun_argv)
    if nproc.nproc_per_node.isdigit() and int(nproc.nproc_per_node) > 1:  # "auto", "gpu": torchrun decides
        os.environ.setdefault("OMP_NUM_THREADS", "1")


def preload_workers(torchrun_argv: list[str], log) -> None:
    """Fork the node's fork server from the agent (lab/node/fork_server.py), before torchrun
    starts, with the whole preload list imported: torch and torch._dynamo are imported once
    per node, not once by the agent and again by its server.

    torch._dynamo is for the workers (an optimizer's constructor imports it); the agent formats
    a worker's failure without it (lab.node.torch_log_format). Imported before the fork, once
    per node; what that costs and saves against the server importing it after:
    docs/exercises.md ("Where the seconds went")."""
    import importlib

    import torch.distributed.run as torch_run

    args = torch_run.parse_args(torchrun_argv)
    if not (args.run_path and args.start_method == "forkserver"):
        raise SystemExit(
            "lab.node.launch: error: --preload-workers needs torchrun's --run-path and --start-method=forkserver"
        )
    # torchrun's config_from_args reads this module attribute when it builds the entrypoint.
    torch_run.run_script_path = run_script_path
    for name in PRELOAD_MODULES:
        importlib.import_module(name)
    fork_server_here()  # with everything loaded: nothing left for the server to import
    log(f"[lab.node.launch] workers fork from a server forked from the agent with {', '.join(PRELOAD_MODULES)} loaded")


def run_script_path(training_script: str, *training_script_args: str) -> None:
    """Run a worker's script in the forked worker, as `python script args` would; the lab's
    watcher of a user's script (lab.topology.WATCHER) as `python -m` would run it.

    torchrun's own run_script_path, plus two things `python script.py` does and it does
    not: the script's directory goes first on sys.path (so it imports its neighbours), and
    `sys.exit()` or `sys.exit(None)` counts as success. torch's @record treats only
    SystemExit(0) as a return; any other SystemExit ends the worker without a return value,
    and the agent then waits for that value forever (the job hangs after it finished).
    """
    import runpy

    sys.argv = [training_script, *training_script_args]
    forget_start_method()
    try:
        if training_script == WATCHER:  # it puts the user's script's folder on sys.path itself
            runpy.run_module(WATCHER, run_name="__main__", alter_sys=True)
            return
        sys.path.insert(0, os.path.dirname(os.path.abspath(training_script)))
        runpy.run_path(training_script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
