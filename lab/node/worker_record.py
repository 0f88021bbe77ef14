"""The agent writes down its workers' pids, so the lab's faults can find them.

A spawned worker carries LOCAL_RANK in its environment, which /proc shows; a worker forked
from torchrun's fork server (preloaded workers) shows only the server's environment. The
agent itself knows each worker's pid the moment it starts the group: lab.node.launch wraps
LocalElasticAgent._start_workers to write {"restart": n, "pids": {local_rank: pid}, "agent": pid}
to LAB_WORKERS_FILE, atomically, after every start (the agent's own pid: Node.kill_agent).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from lab import files

RECORD_LIMIT_BYTES = 1 << 20


def install(path: str | Path) -> None:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    path = Path(path)
    original = LocalElasticAgent._start_workers

    def start_and_record(agent, worker_group):
        pids = original(agent, worker_group)
        write(path, worker_group.spec.max_restarts - agent._remaining_restarts, pids)
        return pids

    setattr(LocalElasticAgent, "_start_workers", start_and_record)  # noqa: B010 -- a patch, on purpose


def write(path: Path, restart: int, pids: dict[int, int]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    record = {"restart": restart, "pids": {str(r): p for r, p in pids.items()}, "agent": os.getpid()}
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def read(path: Path) -> tuple[int, dict[int, int]] | None:
    """(restart, {local_rank: pid}) as last written, or None."""
    raw = files.read_regular(path, RECORD_LIMIT_BYTES)  # the node writes it: no link, no FIFO
    try:
        record = json.loads(raw or b"")
        return record["restart"], {int(r): p for r, p in record["pids"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def agent_pid(path: str | Path) -> int | None:
    """The pid of the agent that wrote the record (it starts the workers), or None."""
    try:
        agent = json.loads(files.read_regular(path, RECORD_LIMIT_BYTES) or b"").get("agent")
    except (ValueError, AttributeError):
        return None
    return agent if isinstance(agent, int) else None
