"""The Ray actor a drill keeps per lab node, on the driver's machine: it owns that node through the
runtime's Node handle, which injects each fault on the node's own machine (on a Ray cluster,
through the machine's agent: lab.runtimes.ray_node)."""

from __future__ import annotations

import time
from typing import Any

from lab import runtimes
from lab.errors import LabError
from lab.rundir import RunDir
from lab.runtimes.faults import FAULTS


class NodeAgent:
    """A Ray actor that owns one lab node. Created with ray.remote(num_cpus=0)(NodeAgent)."""

    def __init__(self, run_dir: str, node_name: str):
        nodes = runtimes.for_run_dir(RunDir(run_dir)).attach()
        self.node = next(n for n in nodes if n.name == node_name)

    def inject(self, fault: str, **kwargs: Any) -> dict[str, Any]:
        if fault not in FAULTS:
            raise LabError(f"no fault called {fault!r}; a Node has: {', '.join(sorted(FAULTS))}")
        started = time.time()
        result = getattr(self.node, fault)(**kwargs)
        return {"fault": fault, "node": self.node.name, "time": started, "args": kwargs, "result": result}

    def exit_code(self) -> int | None:
        return self.node.exit_code()
