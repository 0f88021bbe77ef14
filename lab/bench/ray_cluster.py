"""A throwaway Ray cluster of real machines: netns hosts on this machine, each with its own
address and hostname, `ray start --head` on the first and `ray start --address` on the rest.

The coordinators bench kills its head; tests/test_ray_runtime.py runs the ray runtime on
one. It is secured as Ray now makes clusters (one token for every machine and driver), its
processes carry a mark of their own (not the lab's: `lab down` of a lab on it must leave
the cluster alone), and `stop` removes all of it: processes, hosts, temp dirs.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lab import files, procs
from lab.errors import LabError
from lab.runtimes import netns

RAY = str(Path(sys.executable).with_name("ray"))
GCS_PORT = 6379
CLUSTER_MARK = "TLAB_RAY_CLUSTER"  # every process of such a cluster carries it, its value the cluster's id
JOIN_S = 120.0
# Name the host, then become `ray start`. Not the lab's node shim (lab.node.nodeproc): that is a
# child subreaper, and a machine that adopts the lab's orphans and stops them once Ray has exited
# is not a machine that outlives its Ray head. Measured with the shim: when the head was killed,
# node 0's shim, orphaned by its actor, was adopted by the machine's and then SIGTERMed or not,
# as the race went (one CI run of tests/test_ray_runtime.py lost node 0's ranks that way).
# Folders listed before "--" get a disk of their own first: an empty tmpfs over each, in the
# machine's own mount namespace (netns.exec_prefix), so nothing there is shared by accident.
NAMED_EXEC = (
    "import os, socket, subprocess, sys; socket.sethostname(sys.argv[1]); cut = sys.argv.index('--'); "
    "[subprocess.run(['mount', '-t', 'tmpfs', '-o', 'mode=0755', 'tlab-own-disk', d], check=True) "
    "for d in sys.argv[2:cut]]; os.execv(sys.argv[cut + 1], sys.argv[cut + 1:])"
)


class MachineEnded(LabError):
    """A machine's `ray start --block` ended before it joined the cluster."""


@dataclass
class RayCluster:
    net: netns.LabNet
    hosts: list[netns.Host] = field(default_factory=list)
    own_disks: dict[int, list[str]] = field(default_factory=dict)  # machine index: its folders of its own
    started: dict[int, subprocess.Popen] = field(default_factory=dict)  # each machine's `ray start --block`
    temp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tlab-rayc-")))
    env: dict[str, str] = field(
        default_factory=lambda: {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    )

    @property
    def address(self) -> str:
        return f"{self.hosts[0].address}:{GCS_PORT}"

    def pids(self) -> list[int]:
        """The cluster's processes now (the lab's processes on it carry the lab's mark instead)."""
        me = self.net.lab_id
        return [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and procs.environ(int(p.name)).get(CLUSTER_MARK) == me
        ]

    def on_head(self, *argv: str, run_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
        """`python -m lab ARGV` on the head machine (its network namespace and hostname)."""
        return subprocess.run(
            [*netns.exec_prefix(self.hosts[0]), sys.executable, "-m", "lab", *argv],
            env={**os.environ, **self.env, "LAB_RUN_DIR": str(run_dir)},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def as_seen_by(self, index: int, path: str | Path) -> Path:
        """path as machine `index` sees it (its own disks mounted), from this machine: through its
        `ray start` process's root (/proc/PID/root)."""
        return Path(f"/proc/{self.started[index].pid}/root") / Path(path).relative_to("/")

    def kill_head(self) -> list[int]:
        """SIGKILL the head's Global Control Store, the one process every Ray machine reports to."""
        gcs = [p for p in self.pids() if procs.command(p) == "gcs_server"]
        if not gcs:
            raise LabError(f"the Ray cluster at {self.address} has no head (gcs_server) running")
        for pid in gcs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return gcs

    def start_machine(self, index: int) -> None:
        """`ray start` on a machine, until it has joined: once more if its first start ended (under
        load on 2 cores a worker's `ray start` once gave up before the head answered, and the
        machine never joined: 7 tests of a CI run errored on it, with nothing said of why)."""
        for attempt in (1, 2):
            started = self.started[index] = self._ray_start(index)
            try:
                return self.wait_for_machines(index + 1, started)
            except MachineEnded as ended:
                if attempt == 2:
                    raise LabError(str(ended)) from None

    def _ray_start(self, index: int) -> subprocess.Popen:
        host = self.hosts[index]
        role = (
            ["--head", f"--port={GCS_PORT}", "--include-dashboard=false"]
            if index == 0
            else [f"--address={self.address}"]
        )
        machine = self.temp / f"m{index}"
        argv = [
            *netns.exec_prefix(host),
            sys.executable, "-c", NAMED_EXEC, host.name, *self.own_disks.get(index, []), "--",
            RAY, "start", "--block", *role, f"--node-ip-address={host.address}", "--num-cpus=2",
            "--object-store-memory=100000000", f"--temp-dir={machine}", "--disable-usage-stats",
        ]  # fmt: skip
        env = {**os.environ, **self.env, CLUSTER_MARK: self.net.lab_id}
        if self.own_disks.get(index):  # its temp files (the nodes' TMPDIR among them) on its own disk too
            env["TMPDIR"] = self.own_disks[index][0]
        # Its output in the cluster's own 0700 temp dir, which no job writes: what a machine that
        # never joined said.
        log = os.open(self.temp / f"m{index}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            return subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True, env=env)
        finally:
            os.close(log)

    def wait_for_machines(self, count: int, started: subprocess.Popen | None = None) -> None:
        """Until `count` machines are in the cluster; MachineEnded when `started` (the last one's
        `ray start --block`) ended first, LabError after JOIN_S, each saying what it printed last."""
        deadline, said = time.monotonic() + JOIN_S, "no answer"
        while time.monotonic() < deadline:
            status = subprocess.run(
                [*netns.exec_prefix(self.hosts[0]), RAY, "status", f"--address={self.address}"],
                capture_output=True, text=True, timeout=60, env={**os.environ, **self.env},
            )  # fmt: skip
            if status.stdout.count("node_") >= count and "Active:" in status.stdout:
                return
            said = ((status.stdout + status.stderr).strip().splitlines() or ["no answer"])[-1]
            if started is not None and started.poll() is not None:
                raise MachineEnded(
                    f"machine {count - 1}'s `ray start` exited {started.returncode} before it joined the Ray "
                    f"cluster at {self.address}: {self._last_words(count - 1)}"
                )
            time.sleep(1)
        raise LabError(
            f"machine {count - 1} never joined the Ray cluster at {self.address} in {JOIN_S:g} s: {said}; "
            f"it said: {self._last_words(count - 1)}"
        )

    def _last_words(self, index: int) -> str:
        text = files.read_text(self.temp / f"m{index}.log", 1 << 16, tail=True) or ""
        return " / ".join(line.strip() for line in text.strip().splitlines()[-3:]) or "nothing"

    def stop(self) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        left = procs.wait_gone(self.pids(), 10)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            self.net.destroy()
        finally:  # a destroy that refuses (hosts not this lab's) still leaves no temp dir
            shutil.rmtree(self.temp, ignore_errors=True)


@contextlib.contextmanager
def ray_cluster(lab_id: str, machines: int = 2, own_disks: dict[int, list[str]] | None = None) -> Iterator[RayCluster]:
    """A Ray cluster of `machines` netns hosts of lab id `lab_id` (the labs run on it get their own).
    own_disks: the folders a machine (by index) sees empty and its own, as if on its own disk (the
    first is its TMPDIR too). Not a folder the lab or its venv is in: that machine would not see it."""
    reason = netns.unavailable_reason()
    if reason:
        raise LabError(f"a Ray cluster of netns hosts needs root and iproute2: {reason}")
    cluster = RayCluster(netns.for_lab(lab_id), own_disks=dict(own_disks or {}))
    try:
        cluster.hosts = cluster.net.create(machines)
        for index in range(machines):
            cluster.start_machine(index)
        yield cluster
    finally:
        cluster.stop()
