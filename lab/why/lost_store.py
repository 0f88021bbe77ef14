"""The rendezvous store lost mid-run, as the agents recorded it: `lab why`'s coordinator line.

Every agent asks its rendezvous store, each monitor interval, whether a node waits to join.
When the store is gone (node 0's agent, which hosts a c10d or lab store, killed; the lab's
etcd stopped) the agents record it: torch's rendezvous as a `RendezvousConnectionError: ...`
message, the lab's as `lab.store_lost` (lab.node.store_loss: the agent went on training).
A rank that then fails reports only a lost peer, so the card says what was lost, when
(the furthest step any rank had completed), which agents saw it, whether they went on,
and which nodes died of a signal (their shim's exit record): the store's host among them.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

from lab.health.events import AgentEvent
from lab.node.nodeproc import recorded_exits

LOST = re.compile(r"^RendezvousConnectionError: (.+)")


@dataclass
class StoreLoss:
    reason: str  # the first agent's words
    agents: list[str]  # the nodes whose agents could not reach the store, first first
    went_on: bool  # the agents kept training without it (lab.store_lost), and no group failed after
    at_step: int | None  # the furthest step any rank had completed when it was first seen
    regroup_failed: bool = False  # a group failed, and its agent then found no store to regroup in
    killed: dict[str, str] = field(default_factory=dict)  # node -> "SIGKILL": nodes ended by a signal

    def text(self) -> str:
        step = f" after step {self.at_step}" if self.at_step is not None else ""
        line = f"rendezvous store lost{step}: the agent{'s' if len(self.agents) > 1 else ''} of "
        line += f"{', '.join(self.agents)} could not reach it ({self.reason})"
        if self.went_on:
            line += "; they went on training without it (it is needed only to form a new round)"
        if self.regroup_failed:
            line += "; the group that failed could not regroup without it"
        if self.killed:
            dead = ", ".join(f"{node} ({how})" for node, how in self.killed.items())
            host = " (a c10d or lab store lives in node 0's agent)" if "node0" in self.killed else ""
            line += f"; killed: {dead}{host}"
        return line


def found(agent_events: list[dict], rank_steps: list[tuple[float, int]], nodes_dir: Path) -> StoreLoss | None:
    """agent_events: lab.health.events.read_agent_events; rank_steps: (time, step) of every STEP."""
    lost = [e for e in agent_events if e["name"] == AgentEvent.STORE_LOST or LOST.match(e["message"])]
    if not lost:
        return None
    first = lost[0]
    said = first["event"].get("metadata", {}).get("reason") if first["name"] == AgentEvent.STORE_LOST else None
    reason = str(said or first["message"]).removeprefix("RendezvousConnectionError: ").split(" See inner exception")[0]
    agents = list(dict.fromkeys(e["node"] for e in lost))
    steps = [step for time, step in rank_steps if time <= first["time"]]
    failed = min((e["time"] for e in agent_events if e["name"] == AgentEvent.FAILURE_DETECTED), default=None)
    return StoreLoss(
        reason=reason.strip(),
        agents=agents,
        went_on=any(e["name"] == AgentEvent.STORE_LOST for e in lost) and (failed is None or failed < first["time"]),
        regroup_failed=failed is not None and any(LOST.match(e["message"]) and e["time"] >= failed for e in lost),
        at_step=max(steps, default=None),
        killed=killed_nodes(nodes_dir),
    )


def killed_nodes(nodes_dir: Path) -> dict[str, str]:
    """node -> the signal its process ended by, from each node's exit record (128 + signal)."""
    killed = {}
    for node, code in recorded_exits(nodes_dir).items():
        if code is not None and code > 128:
            try:
                killed[node] = signal.Signals(code - 128).name
            except ValueError:
                killed[node] = f"signal {code - 128}"
    return killed
