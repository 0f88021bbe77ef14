"""The node's fork server (lab/node/fork_server.py), forked from the agent: its workers
start with what the agent imported before the fork and what the server preloaded after it,
and it leaves when the agent does.

Real processes and multiprocessing's own forkserver protocol; no torch (a stdlib module
stands in for the preload list), so this runs in the fast tier."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import REPO

# The "agent": loads a module, records when, forks the server, then starts a worker
# through multiprocessing's forkserver context, as torchrun's start_processes does.
AGENT = r"""
import multiprocessing, os, sys, time
import decimal
decimal.LOADED_AT = time.monotonic_ns()
from lab.node.fork_server import fork_server_here

def worker(queue):
    import decimal, threading
    queue.put((getattr(decimal, "LOADED_AT", None), os.getppid(), threading.active_count(), "colorsys" in sys.modules))

server = fork_server_here(["colorsys"])  # the server's own preload, imported after the fork
assert "colorsys" not in sys.modules
print(server, decimal.LOADED_AT, flush=True)
context = multiprocessing.get_context("forkserver")
queue = context.Queue()
process = context.Process(target=worker, args=(queue,))
process.start()
print(*queue.get(timeout=30), flush=True)
process.join(timeout=30)
print(process.exitcode, flush=True)
"""


def run_agent() -> tuple[int, int, list[str], int]:  # server pid, load time, the worker's answers, its exit
    out = subprocess.run(
        [sys.executable, "-c", AGENT], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    first, second, third = out.stdout.split("\n")[:3]
    server, loaded_at = map(int, first.split())
    return server, loaded_at, second.split(), int(third)


def test_a_worker_has_what_the_agent_loaded_and_its_server_leaves_with_the_agent():
    server, loaded_at, (worker_saw, worker_parent, threads, preloaded), exitcode = run_agent()
    # The module object is the agent's own, loaded once: not imported again in the server.
    assert int(worker_saw) == loaded_at
    assert int(worker_parent) == server and exitcode == 0
    assert int(threads) == 1 and preloaded == "True"  # and the server's preload list, which the agent skipped
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{server}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{server}"), "the fork server outlived its agent"


def test_a_second_server_in_one_process_is_refused():
    code = "from lab.node.fork_server import fork_server_here as f; f(); f()"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 1 and "a fork server is already running in this process" in out.stderr
