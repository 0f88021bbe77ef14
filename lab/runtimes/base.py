"""The `Node` handle every runtime returns. Faults and exercises talk only to this."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path


class Node(ABC):
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
