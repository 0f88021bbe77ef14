"""A launch plan: what `up` starts, as data, before anything is made.

`lab up --dry-run` (and `lab run --dry-run`) print `text()` and start nothing; `up` records
the same object (`state()`, the run dir's RunState) and starts exactly these nodes. A
runtime's `plan` lays the nodes out; the base Runtime's `up` is the one lifecycle:
prepare (every refusal, then the plan), record it once, provision, start the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lab.runtimes.state import RunState
from lab.topology import Topology


@dataclass
class LaunchPlan:
    runtime: str  # the registry's name
    hosts: str  # netns, userns, loopback, containers, pods
    topology: Topology  # as it will run (its rendezvous host filled in)
    script: str
    script_args: list[str]
    nodes: list[Any]  # the runtime's Node objects, laid out, not started
    rendering: str  # what --dry-run prints: each node's place, environment and command; or manifests
    prometheus: str | None = None  # its URL when the lab will run one (decided when preparing)
    own: dict[str, Any] = field(default_factory=dict)  # what the runtime records of its own

    def text(self) -> str:
        return self.rendering

    def state(self) -> RunState:
        """What the run dir records of this plan (lab.runtimes.state)."""
        nodes = [n.record() for n in self.nodes]
        return RunState(
            self.runtime,
            self.hosts,
            self.topology,
            self.script,
            list(self.script_args),
            nodes=nodes,
            prometheus=self.prometheus,
            own=dict(self.own),
        )
