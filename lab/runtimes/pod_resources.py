"""What a pod of the k8s runtime asks for: `--pod-cpu` and `--pod-memory` set the node
container's requests (the scheduler places a pod only where they fit), and raise its limits
to match where a limit would be lower. The base asks 500m and 1Gi, so a small cluster (a
2-core node) holds a 2-node job; a GPU overlay asks for what its machines have."""

from __future__ import annotations

import re

from lab.errors import LabError

CPU = re.compile(r"(?P<n>\d+(\.\d+)?)(?P<unit>m?)")
MEMORY = re.compile(r"(?P<n>\d+(\.\d+)?)(?P<unit>Ki|Mi|Gi|Ti|k|M|G|T)?")
MEMORY_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
MEMORY_UNITS.update({"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40})


def cpu_amount(text: str) -> float:
    """Cores, from a Kubernetes CPU quantity ("500m", "2", "1.5")."""
    match = CPU.fullmatch(str(text))
    if not match or float(match["n"]) <= 0:
        raise LabError(f"--pod-cpu {text!r} is not a CPU quantity: cores (2, 0.5) or millicores (500m)")
    return float(match["n"]) / (1000 if match["unit"] else 1)


def memory_amount(text: str) -> float:
    """Bytes, from a Kubernetes memory quantity ("1Gi", "512Mi", "4G")."""
    match = MEMORY.fullmatch(str(text))
    if not match or float(match["n"]) <= 0:
        raise LabError(f"--pod-memory {text!r} is not a memory quantity: 512Mi, 1Gi, 4G")
    return float(match["n"]) * MEMORY_UNITS[match["unit"]]


def set_requests(job: dict, cpu: str | None, memory: str | None) -> None:
    """The node container's requests as asked; a lower limit is raised to the request."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    resources = container.setdefault("resources", {})
    requests, limits = resources.setdefault("requests", {}), resources.get("limits", {})
    for key, value, amount in (("cpu", cpu, cpu_amount), ("memory", memory, memory_amount)):
        if value is None:
            continue
        requests[key] = value
        if key in limits and amount(limits[key]) < amount(value):
            limits[key] = value
