"""Every fault a lab node can suffer, declared once (the Node contract's half that drills use).

A runtime's Node overrides the faults it can inject; the rest refuse in one line naming the
runtime, and `Faults.refusal` says which from the class alone (lab.exercises.grid). Each fault
is declared once: its signature, what it does, and (@cannot) the words of its refusal.
"""

# mypy: disable-error-code="empty-body"
# (the faults below are declarations: @cannot gives each its body, the refusal)

from __future__ import annotations

import functools
import signal
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from lab.errors import LabError

__all__ = ["FAULTS", "FaultUnsupported", "Faults", "cannot_words"]

F = TypeVar("F", bound=Callable[..., Any])


class FaultUnsupported(LabError):
    """This runtime cannot inject that fault; the message says which and why."""


def cannot(words: str) -> Callable[[F], F]:
    """Declare a fault: its signature and what it does (the docstring), and what a Node that
    does not override it says, in these words ("the docker runtime cannot kill a node")."""

    def declare(fault: F) -> F:
        @functools.wraps(fault)
        def refuse(self: Faults, *args: Any, **kwargs: Any) -> Any:
            raise FaultUnsupported(f"the {self.runtime_name} runtime cannot {words}")

        refuse.cannot = words  # type: ignore[attr-defined]
        return refuse  # type: ignore[return-value]

    return declare


def cannot_words(fault: str) -> str:
    """What a Node that does not override `fault` says it cannot do."""
    return getattr(Faults, fault).cannot


class Faults:
    """Every fault a Node can suffer, declared once. A runtime's Node overrides the ones it can
    inject; the rest refuse in one line that names the runtime."""

    runtime_name: ClassVar[str] = "this"  # each Node class names its runtime, for the messages below
    # Faults a Node class overrides only to refuse them, with why (the grid and the drills read it).
    REFUSES: ClassVar[dict[str, str]] = {}

    @classmethod
    def refusal(cls, fault: str) -> str:
        """Why nodes of this class cannot suffer `fault`, in one line; "" when they can. Read
        from the class alone (lab.exercises.grid): a fault it does not override refuses."""
        if fault in cls.REFUSES:
            return cls.REFUSES[fault]
        derived = {"pause_worker": "kill_worker", "resume_worker": "kill_worker"}  # signals to a worker
        base = derived.get(fault, fault) if getattr(cls, fault) is getattr(Faults, fault) else None
        if base is not None and getattr(cls, base) is getattr(Faults, base):
            return f"the {cls.runtime_name} runtime cannot {cannot_words(base)}"
        return ""

    @cannot("list its workers")
    def worker_pids(self) -> dict[int, int]:
        """{local_rank: pid} of the workers running now."""

    @cannot("kill a worker")
    def kill_worker(self, local_rank: int, sig: int = signal.SIGKILL) -> int:
        """Signal one worker; returns its pid."""

    @cannot("kill a node")
    def kill_node(self) -> None:
        """SIGKILL the agent and every worker at once, as a machine that loses power."""

    @cannot("kill its agent")
    def kill_agent(self) -> int:
        """SIGKILL the node's torchrun agent alone (on node 0 it hosts a c10d or lab rendezvous
        store, which goes with it; its workers follow it); returns its pid."""

    @cannot("restart a node")
    def restart(self) -> None:
        """Start the node's agent again with the command it last ran."""

    def pause_worker(self, local_rank: int) -> int:
        """SIGSTOP one worker: a hang, as the process sees none of it."""
        return self.kill_worker(local_rank, signal.SIGSTOP)

    def resume_worker(self, local_rank: int) -> int:
        return self.kill_worker(local_rank, signal.SIGCONT)

    @cannot("slow a worker")
    def slow_worker(self, local_rank: int, stopped_fraction: float = 0.75, period_s: float = 0.2) -> int:
        """Make one worker a straggler: it runs only (1 - stopped_fraction) of the time."""

    @cannot("stop slowing a worker")
    def unslow_worker(self) -> None: ...

    @cannot("delay its restarted workers")
    def delay_restarted_workers(self, seconds: float) -> None:
        """From now on, every worker of a restarted group on this node starts `seconds` late,
        as on a loaded machine: stopped the moment it appears, continued after `seconds`."""

    @cannot("partition a node")
    def partition(self) -> None:
        """Drop all of the node's network traffic (loopback stays)."""

    @cannot("heal a partition")
    def heal(self) -> None: ...

    @cannot("delay its network")
    def delay_network(self, delay_ms: float) -> None:
        """Delay every packet the node sends by delay_ms (`tc netem`)."""

    @cannot("throttle its network")
    def throttle_network(self, kbit: int) -> None:
        """Cap what the node sends at kbit per second (`tc tbf`): a slow, congested link."""

    @cannot("restore its network")
    def restore_network(self) -> None:
        """Take the node's delay or cap away."""

    @cannot("preempt a node")
    def preempt(self, grace_s: float) -> None:
        """SIGTERM the agent, SIGKILL what is left after grace_s, as a preempted VM."""

    @cannot("reach its checkpoints")
    def corrupt_checkpoint(self, directory: str, mode: str = "truncate", saved: tuple = ()) -> str:
        """Damage the newest checkpoint in directory (truncate it, or flip bytes); returns its path.
        saved: the [device, inode] of what a user's script saved (only those are damaged)."""


FAULTS = frozenset(
    name for name in vars(Faults) if not name.startswith("_") and name != "refusal" and callable(vars(Faults)[name])
)
