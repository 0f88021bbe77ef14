"""The first process of every local node: name the host, run the node, record how it ended.

    python -m lab.runtimes.nodeproc [--hostname NAME] --exit-file PATH -- COMMAND...

It sets the UTS hostname (inside `unshare --uts`), runs COMMAND as a child, passes
SIGTERM/SIGINT/SIGHUP on to it, and writes the child's exit status to PATH, so
`lab status` in another shell can tell a finished node from a crashed one.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="lab.runtimes.nodeproc")
    parser.add_argument("--hostname")
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.hostname:
        socket.sethostname(args.hostname)

    child = subprocess.Popen(command)

    def forward(signum, _frame):
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    code = child.wait()
    code = 128 - code if code < 0 else code  # killed by signal N -> 128+N, as a shell reports it
    tmp = args.exit_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
    os.replace(tmp, args.exit_file)
    return code


if __name__ == "__main__":
    sys.exit(main())
