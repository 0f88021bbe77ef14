"""The first process of every local node: name the host, run the node, record how it ended.

    python -m lab.node.nodeproc [--hostname NAME] [--log-file LOG] --exit-file PATH -- COMMAND...

It sets the UTS hostname (inside `unshare --uts`), with --private-shm mounts a fresh
tmpfs on /dev/shm (inside `unshare --mount`: a node killed with SIGKILL takes its
multiprocessing semaphores with it instead of leaving them on the machine), runs COMMAND as a child, passes
SIGTERM/SIGINT/SIGHUP on to it, and writes the child's exit status to PATH, so
`lab status` in another shell can tell a finished node from a crashed one.
With --log-file (a container's node, whose output the host reads from a shared
directory) COMMAND's output is appended to LOG as well as passed through.

It is the node's child subreaper: a process the job starts that leaves its parent, its
session and its environment (`setsid env -i daemon &`) is re-parented to this shim, not to
init, and is stopped when the node ends; an environment mark alone would miss it.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

teeing = threading.Event()


def tee(stream, path: str) -> None:
    """Copy the child's output to our stdout (`docker logs`) and to the log file, line by line."""
    with open(path, "ab", buffering=0) as log:
        for line in iter(stream.readline, b""):
            log.write(line)
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
    teeing.set()


def recorded_exit(exit_file: str | os.PathLike) -> int | None:
    """The status a shim recorded in its exit file (128 + N: killed by signal N); None: none yet."""
    try:
        return int(Path(exit_file).read_text())
    except (OSError, ValueError):
        return None


def recorded_exits(nodes_dir: Path) -> dict[str, int | None]:
    """Each node's, under a run dir's nodes/ (None: its shim recorded no end, or has not yet)."""
    return {node.name: recorded_exit(node / "exit") for node in sorted(nodes_dir.glob("*")) if node.is_dir()}


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def children() -> list[int]:
    """Our children now: what is left of the job, orphans of its processes included."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.append(int(entry))
    return found


def stop_leftovers(grace_s: float = 2.0) -> None:
    """TERM, then KILL, every process still parented here, reaping each."""
    import time

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in children():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0) and not children():
                    return
            except ChildProcessError:
                return
            time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(prog="lab.node.nodeproc")
    parser.add_argument("--hostname")
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("--log-file")
    parser.add_argument("--private-shm", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.hostname:
        socket.sethostname(args.hostname)
    if args.private_shm:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "lab-node-shm", "/dev/shm"], check=True, timeout=30
        )

    become_subreaper()
    child = subprocess.Popen(command, stdout=subprocess.PIPE if args.log_file else None, stderr=subprocess.STDOUT)
    if args.log_file:
        threading.Thread(target=tee, args=(child.stdout, args.log_file), daemon=True).start()

    def forward(signum, _frame):
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    code = child.wait()
    if args.log_file:
        teeing.wait(5)  # the last lines of a dying child
    stop_leftovers()
    code = 128 - code if code < 0 else code  # killed by signal N -> 128+N, as a shell reports it
    tmp = args.exit_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
    os.replace(tmp, args.exit_file)
    return code


if __name__ == "__main__":
    sys.exit(main())
