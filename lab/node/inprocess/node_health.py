"""A keeper's node health on Prometheus: the agent metrics torchrun's agent exports
(lab.health.agent_exporter), so a job that recovers in-process is watched like any other.

What the keeper does maps onto them: its ranks running are the worker group HEALTHY; a
replacement or a round (lab.node.inprocess.fallback) is a restart used from its budget
(--max-replacements); each child's exit is counted by its code; the job's end is SUCCEEDED
or FAILED. Served only where the lab asked for an agent exporter (LAB_AGENT_METRICS_PORT),
with the node's round trips to the lab's bridge probed as an agent's are (LAB_NET_PROBE).
"""

from __future__ import annotations

import sys
from pathlib import Path

from lab.health import agent_exporter, net_probe
from lab.health.agent_exporter import AgentMetrics
from lab.health.events import node_name
from lab.health.rank_exporter import ExporterPortError, register_target
from lab.nodeenv import NodeEnv


class NodeHealth:
    """The keeper's metrics (a no-op where none are served)."""

    def __init__(self, max_replacements: int):
        wire, node = NodeEnv.parse(), node_name()
        port = wire.agent_metrics_port or 0  # 0: no agent exporter asked for
        self.metrics = AgentMetrics(node=node, max_restarts=max_replacements) if port else None
        if wire.net_probe and wire.events_dir:
            gauge = self.metrics.net_rtt() if self.metrics else None
            net_probe.start(wire.net_probe, Path(wire.events_dir), node, gauge)
        if self.metrics is None:
            return
        try:
            agent_exporter.serve(self.metrics, port)
        except ExporterPortError as e:
            raise SystemExit(f"lab.node.inprocess.keeper: error: {e}") from None
        if wire.targets_dir:
            register_target(wire.targets_dir, f"agent-{node}", port, {"node": node})
        print(f"[lab.node.launch] agent metrics on :{port}/metrics", file=sys.stderr, flush=True)

    def state(self, name: str) -> None:
        if self.metrics:
            self.metrics.set_state(name)

    def restarts(self, used: int) -> None:
        if self.metrics:
            self.metrics.set_restarts_used(used)

    def exited(self, pid: int, code: int) -> None:
        if self.metrics:
            self.metrics.count_exit(pid, code)
