"""The `Node` handle every runtime returns. Faults and exercises talk only to this."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from lab.errors import LabError


class FaultUnsupported(LabError):
    """This runtime cannot inject that fault; the message says which and why."""


class Faults:
    """The faults a Node can suffer. A runtime overrides the ones it supports."""

    runtime_name = "this"  # each Node class names its runtime, for the messages below

    def _unsupported(self, what: str):
        raise FaultUnsupported(f"the {self.runtime_name} runtime cannot {what}")

    def worker_pids(self) -> dict[int, int]:
        """{local_rank: pid} of the workers running now."""
        self._unsupported("list its workers")

    def kill_worker(self, local_rank: int, sig: int) -> int:
        """Signal one worker; returns its pid."""
        self._unsupported("kill a worker")

    def kill_node(self) -> None:
        """SIGKILL the agent and every worker at once, as a machine that loses power."""
        self._unsupported("kill a node")

    def restart(self) -> None:
        """Start the node's agent again with the command it last ran."""
        self._unsupported("restart a node")

    def pause_worker(self, local_rank: int) -> int:
        self._unsupported("pause a worker")

    def resume_worker(self, local_rank: int) -> int:
        self._unsupported("resume a worker")

    def slow_worker(self, local_rank: int, stopped_fraction: float = 0.75, period_s: float = 0.2) -> int:
        """Make one worker a straggler: it runs only (1 - stopped_fraction) of the time."""
        self._unsupported("slow a worker")

    def unslow_worker(self) -> None:
        self._unsupported("stop slowing a worker")

    def delay_restarted_workers(self, seconds: float) -> None:
        """From now on, every worker of a restarted group on this node starts `seconds` late,
        as on a loaded machine: stopped the moment it appears, continued after `seconds`."""
        self._unsupported("delay its restarted workers")

    def partition(self) -> None:
        """Drop all of the node's network traffic (loopback stays)."""
        self._unsupported("partition a node")

    def heal(self) -> None:
        self._unsupported("heal a partition")

    def preempt(self, grace_s: float) -> None:
        """SIGTERM the agent, SIGKILL what is left after grace_s, as a preempted VM."""
        self._unsupported("preempt a node")

    def corrupt_checkpoint(self, directory: str, mode: str = "truncate") -> str:
        """Damage the newest checkpoint in directory (truncate it, or flip bytes); returns its path."""
        self._unsupported("reach its checkpoints")


class Node(ABC, Faults):
    name: str  # e.g. node0: the node's hostname where the runtime can give it one
    index: int  # the node's index in the topology (node 0 hosts the rendezvous)
    address: str  # where the other nodes (and Prometheus) reach it

    @abstractmethod
    def start(self, argv: list[str]) -> None:
        """Run argv (a Topology.launch_argv) as this node's agent."""

    @abstractmethod
    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the agent (torchrun stops its workers), SIGKILL what outlives grace_s."""

    @abstractmethod
    def exit_code(self) -> int | None:
        """None while the agent runs; its exit status after (128+N if killed by signal N)."""

    @property
    @abstractmethod
    def log_path(self) -> Path:
        """The agent's and its workers' combined output."""


class NodeFiles:
    """A node whose files live in its own directory of the run directory (local and docker nodes;
    a container sees the same paths). Needs .dir."""

    @property
    def log_path(self) -> Path:
        """The agent's and its workers' combined output."""
        return self.dir / "node.log"

    @property
    def exit_file(self) -> Path:
        """The agent's exit status, written by the nodeproc shim."""
        return self.dir / "exit"


def run_dir_env(run_path: Path, targets_dir: Path, node_dir: Path, workers_file: str) -> dict[str, str]:
    """Where a node's agent and workloads keep their state: all under the run directory."""
    return {
        "LAB_EVENTS_DIR": str(run_path / "events"),
        "LAB_CKPT_DIR": str(run_path / "checkpoints"),
        "LAB_TARGETS_DIR": str(targets_dir),
        "LAB_WORKERS_FILE": str(node_dir / workers_file),
    }
