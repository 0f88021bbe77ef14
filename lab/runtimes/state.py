"""What a lab records of itself (the run dir's state.json): one schema for every runtime.

`lab status`, `lab up`, the live view, `lab down` and the next command in the run dir read
it through `load`, whatever runtime wrote it: the runtime, its kind of hosts, the job
(topology, script, arguments), each node's name, index and address, Prometheus' address.
What only one runtime needs to find its things again (a netns subnet, a container image, a
kube context, a Ray address) is that runtime's `own`, kept beside the common keys.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from lab.rundir import RunDir
from lab.topology import Topology

COMMON = ("runtime", "hosts", "topology", "script", "script_args", "nodes", "prometheus", "started_at")


@dataclass
class RunState:
    runtime: str  # the registry's name: local, docker, k8s, ray
    hosts: str  # netns, userns, loopback, containers, pods, machines
    topology: Topology
    script: str
    script_args: list[str] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)  # name, index, address, + the runtime's own
    prometheus: str | None = None  # its URL, when the lab runs one
    started_at: float = field(default_factory=time.time)
    own: dict[str, Any] = field(default_factory=dict)  # the runtime's own keys (subnet, image, context, ...)

    def to_json(self) -> dict[str, Any]:
        common = {name: getattr(self, name) for name in COMMON}
        return {**self.own, **common, "topology": dataclasses.asdict(self.topology)}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RunState:
        """The state from its JSON; a missing or malformed common key raises ValueError."""
        missing = [name for name in ("runtime", "hosts", "topology", "script") if name not in body]
        if missing:
            raise ValueError(f"state.json lacks {', '.join(missing)}")
        try:
            topology = Topology.from_json(body["topology"])
        except (TypeError, ValueError) as e:
            raise ValueError(f"state.json's topology: {e}") from None
        common = {name: body[name] for name in COMMON if name in body and name != "topology"}
        own = {k: v for k, v in body.items() if k not in COMMON}
        return cls(**common, topology=topology, own=own)


def save(run_dir: RunDir, state: RunState) -> None:
    """Write it (atomically, RunDir.write_state): a reader in another shell sees all or nothing."""
    run_dir.write_state(state.to_json())


def load(run_dir: RunDir) -> RunState | None:
    """The lab recorded in run_dir; None when there is none (or only the start of one: a lab
    that died before it wrote its state is cleaned up by `lab down` from its marks)."""
    body = run_dir.read_state()
    if not isinstance(body, dict):
        return None
    try:
        return RunState.from_json(body)
    except ValueError:
        return None
