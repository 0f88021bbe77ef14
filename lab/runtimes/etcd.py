"""An etcd server with the v2 API, for torchrun's `etcd-v2` rendezvous backend.

The rendezvous state then lives outside every node: on the host, where the nodes reach it
(the bridge address for netns hosts, loopback otherwise). Its data lives in the run
directory and it carries the lab's mark, so `lab down` stops it like every other process.
torch's etcd backends speak only etcd's v2 API, which etcd 3.4 serves with --enable-v2.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.request
from pathlib import Path

from lab import procs
from lab.errors import LabError
from lab.rundir import MARKER

INSTALL_HINT = (
    "etcd-v2 rendezvous needs etcd 3.4 (Debian: apt-get install etcd-server) and the "
    "python-etcd client (pip install python-etcd); `make host-deps` installs both"
)


def check_installed() -> str:
    exe = shutil.which("etcd")
    try:
        import etcd  # noqa: F401  (python-etcd: torch's etcd rendezvous imports it in the agent)
    except ImportError:
        exe = None
    if exe is None:
        raise LabError(INSTALL_HINT)
    return exe


def start(directory: Path, address: str, port: int, run_dir: str, timeout_s: float = 30.0) -> str:
    """Start etcd serving clients on address:port; return its client URL once it answers."""
    exe = check_installed()
    directory.mkdir(parents=True, exist_ok=True)
    client = f"http://{address}:{port}"
    # A single-member cluster: the peer port on the same fenced address (lab.runtimes.fence), never
    # on loopback, where every local user could reach it.
    peer = f"http://{address}:{port + 1}"
    argv = [
        exe,
        "--name=lab",
        f"--data-dir={directory / 'data'}",
        "--enable-v2=true",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=lab={peer}",
        "--log-level=warn",
    ]
    log_path = directory / "etcd.log"
    procs.spawn(argv, log_path=log_path, env={**os.environ, MARKER: run_dir})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{client}/v2/keys/", timeout=1) as response:
                if response.status == 200:
                    return client
        except OSError:
            time.sleep(0.2)
    lines = log_path.read_text(errors="replace").strip().splitlines()
    raise LabError(f"etcd did not answer on {client}: {lines[-1] if lines else 'no output'}")
