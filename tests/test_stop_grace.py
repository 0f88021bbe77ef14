"""The tuned restart's stop (lab/node/stop_grace.py), on a real agent: a worker frozen by
SIGSTOP, whose sibling fails, is SIGKILLed 5 s after its SIGTERM, not torch's 30 s, and the
group restarts and finishes."""

import os
import re
import subprocess
import sys
from datetime import datetime

import pytest
from conftest import REPO

from lab.bench import free_port
from lab.recovery import RESTART_STOP_GRACE_S

pytestmark = pytest.mark.slow
# torch's log lines: "W1203 02:40:29.711000 PID .../spawn.py:165] Terminating process ..."
LOGGED = re.compile(r"^[WE]\d{4} (\d\d:\d\d:\d\d\.\d+) .*?\] (Terminating process|Unable to shutdown process)", re.M)


def test_a_frozen_worker_costs_the_tuned_restart_its_grace_not_torchs_30_s(short_tmpdir):
    argv = [sys.executable, "-m", "lab.node.launch", "--preload-workers", "--nnodes=1", "--nproc-per-node=2"]
    argv += ["--rdzv-backend=lab", f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--rdzv-conf=node_rank=0"]
    argv += ["--max-restarts=1", "--run-path", "--start-method=forkserver", "tests/scripts/freeze_rank1.py"]
    # torchrun's log dir and the fork server's socket folder in a TMPDIR of the test's own, as a
    # lab's node has its own (else /tmp/torchelastic_* and /tmp/pymp-* stayed after every run).
    env = {**os.environ, "TMPDIR": str(short_tmpdir)}
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    logs = out.stdout + out.stderr
    assert out.returncode == 0, logs[-3000:]
    assert logs.count("finished the second round") == 2
    times = {what: datetime.strptime(clock, "%H:%M:%S.%f") for clock, what in LOGGED.findall(logs)}
    assert set(times) == {"Terminating process", "Unable to shutdown process"}, logs[-3000:]
    waited = (times["Unable to shutdown process"] - times["Terminating process"]).total_seconds()
    assert RESTART_STOP_GRACE_S - 0.5 <= waited < 15, f"SIGTERM to SIGKILL took {waited:.1f} s"
