"""Every fault a lab node can suffer, declared once (the Node contract's half that drills use).

A runtime's Node overrides the faults it can inject; the rest refuse in one line naming the
runtime, and `Faults.refusal` says which from the class alone (lab.exercises.grid).
"""

from __future__ import annotations

import signal
from typing import Any, ClassVar

from lab.errors import LabError

__all__ = ["FAULTS", "UNSUPPORTED", "FaultUnsupported", "Faults"]


class FaultUnsupported(LabError):
    """This runtime cannot inject that fault; the message says which and why."""


class Faults:
    """Every fault a Node can suffer, declared once. A runtime's Node overrides the ones it can
    inject; the rest refuse in one line that names the runtime."""

    runtime_name: ClassVar[str] = "this"  # each Node class names its runtime, for the messages below
    # Faults a Node class overrides only to refuse them, with why (the grid and the drills read it).
    REFUSES: ClassVar[dict[str, str]] = {}

    def _unsupported(self, what: str) -> Any:
        raise FaultUnsupported(f"the {self.runtime_name} runtime cannot {what}")

    @classmethod
    def refusal(cls, fault: str) -> str:
        """Why nodes of this class cannot suffer `fault`, in one line; "" when they can. Read
        from the class alone (lab.exercises.grid): a fault it does not override refuses."""
        if fault in cls.REFUSES:
            return cls.REFUSES[fault]
        derived = {"pause_worker": "kill_worker", "resume_worker": "kill_worker"}  # signals to a worker
        base = derived.get(fault, fault) if getattr(cls, fault) is getattr(Faults, fault) else None
        if base is not None and getattr(cls, base) is getattr(Faults, base):
            return f"the {cls.runtime_name} runtime cannot {UNSUPPORTED[base]}"
        return ""

    def worker_pids(self) -> dict[int, int]:
        """{local_rank: pid} of the workers running now."""
        return self._unsupported("list its workers")

    def kill_worker(self, local_rank: int, sig: int = signal.SIGKILL) -> int:
        """Signal one worker; returns its pid."""
        return self._unsupported("kill a worker")

    def kill_node(self) -> None:
        """SIGKILL the agent and every worker at once, as a machine that loses power."""
        self._unsupported("kill a node")

    def kill_agent(self) -> int:
        """SIGKILL the node's torchrun agent alone (on node 0 it hosts a c10d or lab rendezvous
        store, which goes with it; its workers follow it); returns its pid."""
        return self._unsupported("kill its agent")

    def restart(self) -> None:
        """Start the node's agent again with the command it last ran."""
        self._unsupported("restart a node")

    def pause_worker(self, local_rank: int) -> int:
        """SIGSTOP one worker: a hang, as the process sees none of it."""
        return self.kill_worker(local_rank, signal.SIGSTOP)

    def resume_worker(self, local_rank: int) -> int:
        return self.kill_worker(local_rank, signal.SIGCONT)

    def slow_worker(self, local_rank: int, stopped_fraction: float = 0.75, period_s: float = 0.2) -> int:
        """Make one worker a straggler: it runs only (1 - stopped_fraction) of the time."""
        return self._unsupported("slow a worker")

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

    def delay_network(self, delay_ms: float) -> None:
        """Delay every packet the node sends by delay_ms (`tc netem`)."""
        self._unsupported("delay its network")

    def throttle_network(self, kbit: int) -> None:
        """Cap what the node sends at kbit per second (`tc tbf`): a slow, congested link."""
        self._unsupported("throttle its network")

    def restore_network(self) -> None:
        """Take the node's delay or cap away."""
        self._unsupported("restore its network")

    def preempt(self, grace_s: float) -> None:
        """SIGTERM the agent, SIGKILL what is left after grace_s, as a preempted VM."""
        self._unsupported("preempt a node")

    def corrupt_checkpoint(self, directory: str, mode: str = "truncate") -> str:
        """Damage the newest checkpoint in directory (truncate it, or flip bytes); returns its path."""
        return self._unsupported("reach its checkpoints")


FAULTS = frozenset(
    name for name in vars(Faults) if not name.startswith("_") and name != "refusal" and callable(vars(Faults)[name])
)
# What a Node that does not override a fault says (Faults' own methods, in the same words).
UNSUPPORTED = {
    "worker_pids": "list its workers",
    "kill_worker": "kill a worker",
    "kill_node": "kill a node",
    "kill_agent": "kill its agent",
    "restart": "restart a node",
    "slow_worker": "slow a worker",
    "unslow_worker": "stop slowing a worker",
    "delay_restarted_workers": "delay its restarted workers",
    "partition": "partition a node",
    "heal": "heal a partition",
    "delay_network": "delay its network",
    "throttle_network": "throttle its network",
    "restore_network": "restore its network",
    "preempt": "preempt a node",
    "corrupt_checkpoint": "reach its checkpoints",
}
