"""Preloaded workers: torchrun's forked workers, started with torch already imported.

torchrun runs a --run-path script in a process forked from a multiprocessing fork server
when --start-method=forkserver. `lab.node.launch --preload-workers` has that server import
torch (and what a DDP trainer pulls in lazily) once per node, before it forks any worker;
the server outlives restarts, so a restarted worker starts in a fifth of a second instead
of seconds. The server starts with the agent, so its imports overlap the rendezvous (about
1 s sooner to the first step of a 2 x 2 drill). Measured in docs/exercises.md (Measured).
"""

from __future__ import annotations

import os
import sys

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


def preload_workers(torchrun_argv: list[str], log) -> None:
    """Set the fork server's preload list and the lab's script runner, before torchrun starts."""
    import multiprocessing

    import torch.distributed.run as torch_run

    args = torch_run.parse_args(torchrun_argv)
    if not (args.run_path and args.start_method == "forkserver"):
        raise SystemExit(
            "lab.node.launch: error: --preload-workers needs torchrun's --run-path and --start-method=forkserver"
        )
    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD_MODULES)
    # torchrun's config_from_args reads this module attribute when it builds the entrypoint.
    torch_run.run_script_path = run_script_path
    log(f"[lab.node.launch] workers fork from a server that preloads {', '.join(PRELOAD_MODULES)}")
    start_server_now(torch_run.determine_local_world_size(args.nproc_per_node))


def start_server_now(nproc_per_node: int) -> None:
    """Start the fork server before the rendezvous rather than at the first worker's spawn, so
    its imports (seconds) overlap the agent's rendezvous instead of following it.

    The server's environment is what its workers inherit, and OpenMP reads OMP_NUM_THREADS
    once, when torch loads in the server: so set it first, as torchrun would a moment later
    (1 for more than one worker per node, unless the user chose)."""
    import multiprocessing.forkserver

    if nproc_per_node > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    multiprocessing.forkserver.ensure_running()


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
    try:
        if training_script == WATCHER:  # it puts the user's script's folder on sys.path itself
            runpy.run_module(WATCHER, run_name="__main__", alter_sys=True)
            return
        sys.path.insert(0, os.path.dirname(os.path.abspath(training_script)))
        runpy.run_path(training_script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
