"""A node of the local runtime: a process tree on this machine, in its netns host, its user
namespace, or on the machine's loopback, behind the nodeproc shim that records its exit."""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lab import files, procs
from lab.node.nodeproc import recorded_exit
from lab.rundir import MARKER, NODE_MARKER
from lab.runtimes import netns, userns
from lab.runtimes.local_faults import LocalFaults


@dataclass
class LocalNode(LocalFaults):
    runtime_name = "local"
    name: str
    index: int
    address: str
    netns: str | None
    dir: Path
    run_dir: str
    userns_pid: int | None = None  # userns hosts: the holder of the nodes' namespace

    @property
    def pid(self) -> int | None:
        try:
            return int(files.read_regular(self.dir / "pid", 64) or b"")
        except ValueError:
            return None

    def record(self) -> dict:
        return {"name": self.name, "index": self.index, "address": self.address, "netns": self.netns}

    def wrapper(self) -> list[str]:
        """What runs around the node's command: its host namespaces and the nodeproc shim."""
        shim = [sys.executable, "-m", "lab.node.nodeproc", f"--exit-file={self.exit_file}"]
        if self.userns_pid is not None:
            return [*userns.exec_prefix(self.userns_pid), *shim]
        if self.netns is None and os.geteuid() == 0:  # a /dev/shm of its own, as netns nodes have
            return ["unshare", "--mount", "--propagation", "private", "--", *shim, "--private-shm"]
        if self.netns is None:
            return shim
        host = netns.Host(self.name, self.netns, self.address)
        return [*netns.exec_prefix(host), *shim, f"--hostname={self.name}", "--private-shm"]

    def start(self, argv: list[str]) -> None:
        self.remember_argv(argv)
        self.exit_file.unlink(missing_ok=True)
        self.workers_file.unlink(missing_ok=True)  # the last run's workers
        env = {**os.environ, MARKER: self.run_dir, NODE_MARKER: self.name}
        proc = procs.spawn([*self.wrapper(), "--", *argv], log_path=self.log_path, env=env)
        files.write_beneath(self.dir, "pid", str(proc.pid))

    def exit_code(self) -> int | None:
        code = self._recorded_exit()
        if code is not None:
            return code
        pid = self.pid
        if pid is not None and procs.alive(pid):
            return None
        time.sleep(0.05)  # the shim may have been writing the file as it exited
        code = self._recorded_exit()
        # No record: the shim itself was killed (or never started). Report it as SIGKILL.
        return code if code is not None else 128 + signal.SIGKILL

    def _recorded_exit(self) -> int | None:
        return recorded_exit(self.exit_file)

    def stop(self, grace_s: float = 10.0) -> None:
        if self.pid is not None and procs.send(self.pid, signal.SIGTERM, self.run_dir):  # the shim passes it on
            procs.wait_gone([self.pid], grace_s)
        procs.terminate(procs.marked_pids(self.run_dir, self.name), grace_s=1.0, run_dir=self.run_dir)
