"""Loopback nodes inside one unprivileged user+network namespace (lab.runtimes.userns), run for
real as an unprivileged user (uid 65534 through setpriv) and as root with --hosts userns: the job
trains, and the c10d store it listens on is not reachable from the host's network."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
from conftest import REPO, SCRIPTS, wait_for_output
from test_multinode import ranks_from

from lab import procs
from lab.runtimes import userns
from lab.workloads import script_path

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="needs root (to become an unprivileged user) and setpriv",
    ),
    pytest.mark.skipif(
        userns.unavailable_reason() is not None, reason=f"no user namespaces: {userns.unavailable_reason()}"
    ),
]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def nobody_cannot_run_python() -> str | None:
    """Inside its namespace an unprivileged user must reach this interpreter (a venv whose python
    lives under a 0700 /root, say, it cannot)."""
    probe = subprocess.run(
        [*NOBODY, "unshare", "-r", "--", os.path.realpath(sys.executable), "-c", "import torch"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return None if probe.returncode == 0 else f"uid 65534 cannot run {os.path.realpath(sys.executable)} in a userns"


NOBODY_SKIP = nobody_cannot_run_python() if os.geteuid() == 0 and shutil.which("setpriv") else "not root"
as_nobody = pytest.mark.skipif(NOBODY_SKIP is not None, reason=str(NOBODY_SKIP))


@pytest.fixture
def nobody_run_dir():
    """A run dir under a folder the unprivileged user owns (pytest's tmp_path is root's, 0700)."""
    parent = tempfile.mkdtemp(prefix="lab-nobody-")
    os.chown(parent, 65534, 65534)
    yield os.path.join(parent, "run")
    subprocess.run(
        [*NOBODY, sys.executable, "-m", "lab", "down", "--run-dir", os.path.join(parent, "run")],
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )
    shutil.rmtree(parent, ignore_errors=True)


def lab_as_nobody(*args: str) -> list[str]:
    return [*NOBODY, sys.executable, "-m", "lab", *args]


def listening(port: int, holder: int | None = None) -> bool:
    """Whether something listens on TCP port in the host's network (or in holder's namespace)."""
    enter = ["nsenter", f"--target={holder}", "--net"] if holder else []
    out = subprocess.run([*enter, "ss", "-ltnH"], capture_output=True, text=True, timeout=30).stdout
    return any(line.split()[3].endswith(f":{port}") for line in out.splitlines() if len(line.split()) > 3)


@as_nobody
def test_an_unprivileged_lab_trains_in_its_own_namespace(nobody_run_dir):
    out = subprocess.run(
        lab_as_nobody("up", "--run-dir", nobody_run_dir, "--nodes", "2", "--nproc-per-node", "2"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HOME": "/tmp"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "own network namespace" in out.stdout
    ranks = ranks_from(out.stdout)
    assert {r.checksum for r in ranks} == {"-4.676729"} and len(ranks) == 4


@pytest.mark.parametrize("who", [pytest.param("nobody", marks=as_nobody), "root"])
def test_the_store_is_not_reachable_from_the_hosts_network(nobody_run_dir, lab, who):
    # root's run dir under root's own tmp dir: in the namespace, root cannot pass a dir of uid 65534's
    run_dir = nobody_run_dir if who == "nobody" else str(lab.run_dir)
    argv = [
        "run",
        "--run-dir",
        run_dir,
        "--hosts",
        "userns",
        "--rdzv-port",
        "29477",
        "--nodes",
        "2",
        "--nproc-per-node",
        "1",
        str(SCRIPTS / "hold.py"),
    ]
    command = lab_as_nobody(*argv) if who == "nobody" else [sys.executable, "-m", "lab", *argv]
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HOME": "/tmp"},
    )
    try:
        if not wait_for_output(proc, " ready on ", count=2, timeout_s=180):
            proc.kill()
            pytest.fail(f"the job never came up: {proc.stdout.read()[-3000:]}")
        marked = procs.marked_pids(run_dir)
        holder = next(p for p in marked if "sleep" in open(f"/proc/{p}/cmdline").read())
        assert listening(29477, holder), "the store should listen inside the nodes' namespace"
        assert not listening(29477), "the store must not be reachable from the host's network"
        owner = 65534 if who == "nobody" else 0
        assert all(os.stat(f"/proc/{p}").st_uid == owner for p in marked), "every process is the caller's"
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        proc.kill()
        proc.stdout.close()
    assert proc.returncode == 128 + signal.SIGTERM
    assert procs.marked_pids(run_dir) == []


def test_root_can_ask_for_userns_hosts_too(lab):
    out = lab("run", "--hosts", "userns", "--nodes", "2", "--nproc-per-node", "1", script_path("ddp_train"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert len(ranks_from(out.stdout)) == 2 and "own network namespace" in out.stdout
