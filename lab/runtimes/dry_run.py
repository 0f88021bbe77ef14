"""What `--dry-run` prints for runtimes that know their nodes before starting them."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import TypeVar

from lab import gpus
from lab.node.launch import lab_environment
from lab.runtimes.base import Node, Runtime
from lab.topology import Topology

N = TypeVar("N", bound=Node)


def plan_text(
    runtime: Runtime,
    topology: Topology,
    nodes: Sequence[N],
    script: str,
    script_args: list[str],
    wrapper: Callable[[N], list[str]] | None = None,
) -> str:
    """Each node: where it runs, its GPUs, the environment lab.node.launch sets, its command."""
    lines = []
    devices = gpus.assign(topology.nodes, topology.node_gpus, gpus.count())
    for node in nodes:
        lines.append(f"# {node.name}: {node.address} ({runtime.describe(node)})")
        if devices[node.index]:
            lines.append(
                f"#   gpus {','.join(map(str, devices[node.index]))} of this machine's {gpus.count()} "
                "(CUDA_VISIBLE_DEVICES; a container's device_ids)"
            )
        env = lab_environment({**topology.env(node.index), **runtime.node_env(node)}, topology.torch_defaults)
        for name, value in sorted(env.items()):
            lines.append(f"#   env {name}={value}  (set by lab.node.launch unless you set it)")
        if wrapper is not None:
            lines.append(f"#   wrapped in: {shlex.join(wrapper(node))} --")
        lines.append(shlex.join(runtime.node_argv(topology, node, script, script_args)))
    return "\n".join(lines) + "\n"
