"""Loopback nodes without root, closed to the LAN: one unprivileged user + network namespace.

Without root the lab cannot build netns hosts, and nodes on the host's loopback would leave
torch's c10d store (which unpickles what it reads) and the exporters listening on every
interface of the machine. Where the kernel allows unprivileged user namespaces, the lab
instead starts one holder process in a new user+network namespace (`unshare -rn`, loopback
up inside), and every node joins it (`nsenter --user --net`): the nodes talk over that
namespace's own loopback, and nothing they listen on is reachable from outside it. The
holder carries the lab's mark, so `lab down` stops it with the nodes. The host's Prometheus
cannot reach into it either: use --hosts loopback to watch the ranks.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from pathlib import Path

from lab import procs
from lab.errors import LabError
from lab.rundir import MARKER

# Loopback up, and a /dev/shm of the lab's own: multiprocessing semaphores of killed nodes go
# when the holder goes, instead of staying on the machine.
HOLD = "ip link set lo up && mount -t tmpfs -o mode=1777,nosuid,nodev lab-shm /dev/shm && exec sleep 2147483647"


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why an unprivileged user+network namespace cannot be made here, or None."""
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install util-linux iproute2)"
    try:
        probe = subprocess.run(
            [
                "unshare",
                "-rnm",
                "--propagation",
                "private",
                "sh",
                "-c",
                "ip link set lo up && mount -t tmpfs lab-shm /dev/shm",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except subprocess.TimeoutExpired:
        return "`unshare -rn` did not answer"
    if probe.returncode != 0:
        return f"the kernel refuses unprivileged user namespaces ({probe.stderr.strip()[:120]})"
    return None


def start_holder(run_dir: str, log_path: Path, timeout_s: float = 10.0) -> int:
    """The namespace's first process (it holds the namespace open); returns its pid once it is in."""
    env = {**os.environ, MARKER: run_dir}
    holder = procs.spawn(
        ["unshare", "-rnm", "--propagation", "private", "--", "sh", "-c", HOLD], log_path=log_path, env=env
    )
    mine = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if (
                os.readlink(f"/proc/{holder.pid}/ns/net") != mine
                and "sleep" in Path(f"/proc/{holder.pid}/cmdline").read_text()
            ):
                return holder.pid
        except OSError:
            pass
        if holder.poll() is not None:
            break
        time.sleep(0.02)
    raise LabError(f"the nodes' user+network namespace did not start: {log_path.read_text().strip()[-200:]}")


def exec_prefix(holder_pid: int) -> list[str]:
    """Run a command inside the holder's user, network and mount namespaces."""
    # --preserve-credentials: the caller's uid is the one `unshare -r` mapped (to root inside), and
    # setgroups, which nsenter would call otherwise, is denied in such a namespace.
    return ["nsenter", f"--target={holder_pid}", "--user", "--net", "--mount", "--preserve-credentials", "--"]
