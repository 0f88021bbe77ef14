"""Faults on local nodes: signals to the node's marked processes, iptables inside its netns."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

from lab import files, procs
from lab.node import worker_record
from lab.node.duty_cycle import duty_cycle
from lab.runtimes.base import Node, NodeFiles
from lab.runtimes.faults import FaultUnsupported

PARTITION_COMMENT = "torchrun-lab-partition"


def _continue(pid: int, run_dir: str) -> None:
    procs.send(pid, signal.SIGCONT, run_dir)


class LocalFaults(NodeFiles, Node):
    """The faults of a node whose processes run on this machine, found by the run dir's mark
    (LocalNode; on a Ray cluster, each machine's own node)."""

    run_dir: str  # the mark its processes carry
    netns: str | None  # its network namespace, None on loopback
    _slowing: tuple[threading.Event, threading.Thread, int] | None = None

    def worker_pids(self) -> dict[int, int]:
        recorded = worker_record.read(self.workers_file)
        if recorded:  # the agent's own record: the only way to know forked workers' ranks
            return {rank: pid for rank, pid in recorded[1].items() if procs.alive(pid)}
        workers = {}
        for pid in procs.marked_pids(self.run_dir, self.name):
            env = procs.environ(pid)
            # Workers carry LOCAL_RANK and TORCHELASTIC_RESTART_COUNT; the agent does not.
            if "LOCAL_RANK" in env and "TORCHELASTIC_RESTART_COUNT" in env:
                workers[int(env["LOCAL_RANK"])] = pid
        return workers

    def _worker(self, local_rank: int) -> int:
        workers = self.worker_pids()
        if local_rank not in workers:
            raise FaultUnsupported(
                f"{self.name} has no running worker with local rank {local_rank} (running: {sorted(workers)})"
            )
        return workers[local_rank]

    def kill_worker(self, local_rank: int, sig: int = signal.SIGKILL) -> int:
        pid = self._worker(local_rank)
        if not procs.send(pid, sig, self.run_dir):  # gone, or the pid now belongs to something else
            raise FaultUnsupported(f"worker {local_rank} of {self.name} (pid {pid}) is no longer running")
        return pid

    def slow_worker(self, local_rank: int, stopped_fraction: float = 0.75, period_s: float = 0.2) -> int:
        """SIGSTOP/SIGCONT on a duty cycle, from a thread of the calling process (the node agent)."""
        pid = self._worker(local_rank)
        self.unslow_worker()
        stop = threading.Event()
        self._slowing = (
            stop,
            threading.Thread(target=duty_cycle, args=(pid, stopped_fraction, period_s, stop.wait), daemon=True),
            pid,
        )
        self._slowing[1].start()
        return pid

    def unslow_worker(self) -> None:
        slowing = self._slowing
        if slowing:
            stop, thread, pid = slowing
            stop.set()
            thread.join()
            procs.send(pid, signal.SIGCONT, self.run_dir)
            self._slowing = None

    def delay_restarted_workers(self, seconds: float) -> None:
        """A watcher thread in the calling process (the node agent) stops each new restarted
        worker within ~50 ms of its spawn, long before `import torch` is done. Spawned
        workers only: it finds them by their environment, and a preloaded worker has done
        its imports before anyone could stop it."""
        seen: set[int] = set()

        def watch():
            while self.exit_code() is None:
                for pid in procs.marked_pids(self.run_dir, self.name):
                    restart = procs.environ(pid).get("TORCHELASTIC_RESTART_COUNT", "0")
                    if pid not in seen and restart != "0":
                        seen.add(pid)
                        procs.send(pid, signal.SIGSTOP, self.run_dir)
                        threading.Timer(seconds, _continue, args=(pid, self.run_dir)).start()
                time.sleep(0.02)

        threading.Thread(target=watch, daemon=True).start()

    def kill_node(self) -> None:
        pids = procs.marked_pids(self.run_dir, self.name)
        procs.signal_all(pids, signal.SIGKILL, self.run_dir)
        procs.wait_gone(pids, 5)

    def kill_agent(self) -> int:
        pid = worker_record.agent_pid(self.workers_file)
        if pid is None or not procs.send(pid, signal.SIGKILL, self.run_dir):
            raise FaultUnsupported(f"{self.name} has no running agent that has started workers")
        procs.wait_gone([pid], 5)
        return pid

    def preempt(self, grace_s: float) -> None:
        if self.pid is not None:
            procs.send(self.pid, signal.SIGTERM, self.run_dir)  # the shim hands it to torchrun, which TERMs the workers
        survivors = procs.wait_gone(procs.marked_pids(self.run_dir, self.name), grace_s)
        procs.signal_all(survivors, signal.SIGKILL, self.run_dir)

    def remember_argv(self, argv: list[str]) -> None:
        files.write_beneath(self.dir, "argv.json", json.dumps(argv))

    def restart(self) -> None:
        if self.exit_code() is None:
            raise FaultUnsupported(f"{self.name} is still running; kill it before restarting it")
        self.start(json.loads(files.read_regular(self.dir / "argv.json", 1 << 20) or b"[]"))

    def _in_netns(self, what: str, *command: str) -> subprocess.CompletedProcess:
        if self.netns is None:
            raise FaultUnsupported(
                f"loopback nodes share the host's network: {what} needs netns hosts "
                "(run as root with iproute2, --hosts netns)"
            )
        try:
            return subprocess.run(
                ["ip", "netns", "exec", self.netns, *command], capture_output=True, text=True, timeout=60
            )
        except subprocess.TimeoutExpired:
            raise FaultUnsupported(f"{command[0]} in {self.netns} did not answer within 60s") from None

    def _netns_iptables(self, *args: str) -> subprocess.CompletedProcess:
        return self._in_netns("a partition", "iptables", "-w", "30", *args)

    def _egress(self, what: str, *qdisc: str) -> None:
        """A queueing discipline on the node's own end of its link (eth0 in its namespace): what
        the node sends goes through it; what it receives does not."""
        out = self._in_netns(what, "tc", "qdisc", "replace", "dev", "eth0", "root", *qdisc)
        if out.returncode != 0:
            said = out.stderr.strip()
            if "qdisc kind is unknown" in said:
                said = f"this kernel has no {qdisc[0]} queueing discipline ({said})"
            raise FaultUnsupported(f"cannot apply {what} to {self.name}: {said}")

    def delay_network(self, delay_ms: float) -> None:
        self._egress("a network delay", "netem", "delay", f"{delay_ms:g}ms")

    def throttle_network(self, kbit: int) -> None:
        # A burst of 2 KB and a queue of up to a second: packets wait their turn, as on a busy link.
        self._egress("a bandwidth cap", "tbf", "rate", f"{kbit}kbit", "burst", "2kb", "latency", "1s")

    def restore_network(self) -> None:
        self._in_netns("a network change", "tc", "qdisc", "del", "dev", "eth0", "root")

    def partition(self) -> None:
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            out = self._netns_iptables(
                "-I", chain, "1", "!", flag, "lo", "-m", "comment", "--comment", PARTITION_COMMENT, "-j", "DROP"
            )
            if out.returncode != 0:
                raise FaultUnsupported(f"cannot partition {self.name}: {out.stderr.strip()}")

    def heal(self) -> None:
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            while (
                self._netns_iptables(
                    "-D", chain, "!", flag, "lo", "-m", "comment", "--comment", PARTITION_COMMENT, "-j", "DROP"
                ).returncode
                == 0
            ):
                pass  # delete until none is left


QDISC_TRIAL = {"netem": ["delay", "1ms"], "tbf": ["rate", "1mbit", "burst", "2kb", "latency", "1s"]}


def kernel_has(qdisc: str) -> bool:
    """Whether this machine's kernel takes a queueing discipline (netem is often left out of
    small kernels): tried on the loopback of a namespace made for the question."""
    name = f"tlab-qdisc-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        return False
    try:
        tried = ["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", qdisc, *QDISC_TRIAL[qdisc]]
        return subprocess.run(tried, capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
