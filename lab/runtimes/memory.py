"""Whether this machine has the memory a topology's nodes need, checked before any starts.

Every node of the local and docker runtimes runs on this machine: a torchrun agent and a
fork server that each import torch, and the workers. Measured on the 2-core lab machine
(torch 2.13 CPU, the trainer): a node of one worker takes about 560 MiB, each further
worker about 160 MiB more (RSS counts the shared torch pages once per process; these
figures count them once per node). A topology that cannot fit is refused in one line
instead of starting nodes until the kernel's OOM killer picks one.
"""

from __future__ import annotations

from lab.errors import LabError
from lab.topology import Topology

NODE_MIB = 400  # the agent, the fork server, the shims
WORKER_MIB = 160


def needed_mib(topology: Topology) -> int:
    return topology.nodes * (NODE_MIB + WORKER_MIB * topology.nproc_per_node)


def available_mib(meminfo: str = "/proc/meminfo") -> int | None:
    try:
        for line in open(meminfo):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return None


def check_fits(topology: Topology, where: str = "this machine") -> None:
    available = available_mib()
    needed = needed_mib(topology)
    if available is not None and needed > available:
        fits = max(1, available // (NODE_MIB + WORKER_MIB * topology.nproc_per_node))
        raise LabError(
            f"{topology.nodes} nodes x {topology.nproc_per_node} workers need about {needed} MiB; {where} has "
            f"{available} MiB available: use --nodes {fits} or fewer"
        )
