"""Whether this machine has the memory a topology's nodes need, checked before any starts;
and the share of its cores each rank gets.

Every node of the local and docker runtimes runs on this machine: a torchrun agent and a
fork server that each import torch, and the workers. Measured on the 2-core lab machine
(torch 2.13 CPU, the trainer): a node of one worker takes about 560 MiB, each further
worker about 160 MiB more (RSS counts the shared torch pages once per process; these
figures count them once per node). A topology that cannot fit is refused in one line
instead of starting nodes until the kernel's OOM killer picks one.
"""

from __future__ import annotations

import os

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


def threads_per_rank(topology: Topology, cpus: int | None = None) -> dict[str, str]:
    """OMP_NUM_THREADS for ranks that share this machine. torchrun sets 1 itself only when a node
    has several workers; nodes of one worker each would each take every core (measured: two
    1-worker nodes on 2 cores, 50.0 s against 24.6 s with 1 thread). lab.node.launch sets it
    unless the user did, and says so."""
    if topology.nproc_per_node > 1:
        return {}  # torchrun's own default of 1 applies
    cores = cpus if cpus is not None else (os.cpu_count() or 1)
    return {"OMP_NUM_THREADS": str(max(1, cores // topology.world_size))}
