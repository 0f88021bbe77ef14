"""Which GPUs each node of a job gets, when nodes share one machine.

torchrun maps local rank r to cuda:r on every node. Two nodes on one machine (netns or
loopback hosts, containers) would then put their local rank 0s on the same GPU, which
NCCL refuses, so each co-located node sees a disjoint set: node i gets GPUs
[i*g, (i+1)*g) through CUDA_VISIBLE_DEVICES (or a container's device_ids), g being
--gpus-per-node (default: --nproc-per-node).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from lab.errors import LabError


@functools.lru_cache(maxsize=1)
def count() -> int:
    """GPUs on this machine: nvidia-smi's list (no torch import: the CLI stays fast); 0 without
    a driver. LAB_GPU_COUNT overrides it (tests fake a machine with it; say, 4 GPUs)."""
    if os.environ.get("LAB_GPU_COUNT", "").isdigit():
        return int(os.environ["LAB_GPU_COUNT"])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def per_node(backend: str, nproc_per_node: int, gpus_per_node: int | None) -> int:
    """How many GPUs one node uses: none with gloo, one per worker with nccl unless told."""
    if backend != "nccl":
        return gpus_per_node or 0
    return nproc_per_node if gpus_per_node is None else gpus_per_node


def assign(nodes: int, gpus_per_node: int, available: int) -> list[list[int]]:
    """Disjoint GPU indices for each of `nodes` co-located nodes; a one-line refusal when short."""
    if gpus_per_node <= 0:
        return [[] for _ in range(nodes)]
    if nodes * gpus_per_node > available:
        raise LabError(
            f"{nodes} nodes x {gpus_per_node} GPUs need {nodes * gpus_per_node} GPUs; this machine has "
            f"{available} (fewer --nodes or --nproc-per-node, or --gpus-per-node)"
        )
    return [list(range(i * gpus_per_node, (i + 1) * gpus_per_node)) for i in range(nodes)]


def visible_devices(devices: list[int]) -> dict[str, str]:
    """The node's environment for its GPUs (nothing when it has none)."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))} if devices else {}


def describe() -> str:
    """One line: which torch build this is and what CUDA it finds (images run it as a check)."""
    import torch

    build = torch.version.cuda
    if build is None:
        return f"torch {torch.__version__}: a CPU build, no CUDA (nccl needs torch's CUDA build)"
    if not torch.cuda.is_available():
        return (
            f"torch {torch.__version__} (CUDA {build} build): CUDA is unavailable on this machine "
            "(no NVIDIA GPU or driver visible)"
        )
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return f"torch {torch.__version__} (CUDA {build} build): {torch.cuda.device_count()} GPU(s): {names}"


if __name__ == "__main__":
    print(describe())
