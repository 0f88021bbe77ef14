"""A preempted agent still arrives at torchrun's exit barrier (lab/node/exit_barrier.py), on real
agents: two nodes of a fixed-size job on loopback under the lab's rendezvous, node 1's agent sent
SIGTERM. Its worker and node 0's stop together at one step and succeed; node 0's agent, its work
done, finds node 1 counted in and ends, where before it waited out the barrier's 300 s."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO

from lab.bench import free_port

pytestmark = pytest.mark.slow
SCRIPT = "tests/scripts/stop_together.py"


def agent(node_rank: int, port: int, tmpdir) -> subprocess.Popen:
    """The node's agent, its output (and its worker's) in a file: a pipe nobody reads while the
    other agent is waited for fills, and a worker blocked writing to it never exits."""
    argv = [
        sys.executable,
        "-m",
        "lab.node.launch",
        "--preload-workers",
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=lab",
    ]
    argv += [f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-conf=node_rank={node_rank}", "--max-restarts=0"]
    argv += ["--monitor-interval=0.1", "--run-path", "--start-method=forkserver", SCRIPT]
    env = {**os.environ, "TMPDIR": str(tmpdir), "LOGLEVEL": "INFO"}  # torch's agent says when its barrier is done
    log = open(tmpdir / f"agent{node_rank}.log", "w")  # noqa: SIM115 - the agent writes it; closed by the test
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


def test_a_preempted_node_counts_in_at_the_exit_barrier_and_the_other_ends_with_its_work(short_tmpdir):
    port = free_port()
    agents = [agent(rank, port, short_tmpdir) for rank in (0, 1)]
    try:
        deadline = time.monotonic() + 120
        while not all((short_tmpdir / f"ready-{rank}").exists() for rank in (0, 1)):
            if time.monotonic() > deadline or any(a.poll() is not None for a in agents):
                pytest.fail("the workers never said they were ready")
            time.sleep(0.1)
        agents[1].send_signal(signal.SIGTERM)
        for a in agents:
            a.wait(timeout=200)  # without the arrival, node 0 would wait out the barrier: 300 s
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
    node0, node1 = ((short_tmpdir / f"agent{rank}.log").read_text() for rank in (0, 1))
    assert agents[0].returncode == 0, node0[-3000:]
    assert "counted in at the exit barrier" in node1, node1[-3000:]
    assert "stopped at step" in node0 and "stopped at step" in node1
    assert "Done waiting for other agents" in node0, node0[-3000:]  # the barrier completed: not its timeout
    assert "Error waiting on exit barrier" not in node0
