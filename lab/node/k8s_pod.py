"""A Kubernetes pod's entry point: render this node's command from the topology ConfigMap.

    python -m lab.node.k8s_pod

The manifests (k8s/) run this in every pod of the Indexed Job. It reads
  LAB_TOPOLOGY           JSON of lab.topology.Topology's fields (from the ConfigMap);
                         "nproc_per_node": "gpu" means one worker per visible GPU
  JOB_COMPLETION_INDEX   the pod's index, set by the Job controller: the node rank
  LAB_WORKLOAD           a workload name (trainer, ddp_train, ...) or a script path
  LAB_WORKLOAD_ARGS      its arguments, shell-quoted
and replaces itself with `python -m lab.node.launch ...` exactly as Topology.launch_argv
renders it, so pods run the same command as every other runtime's nodes.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import NoReturn

from lab.topology import Topology, TopologyError
from lab.workloads import script_path


def fail(message: str) -> NoReturn:
    raise SystemExit(f"lab.node.k8s_pod: error: {message}")


def topology_from_env(env) -> Topology:
    if "LAB_TOPOLOGY" not in env:
        fail("LAB_TOPOLOGY is not set (the topology ConfigMap is missing from the pod)")
    try:
        fields = json.loads(env["LAB_TOPOLOGY"])
    except json.JSONDecodeError as e:
        fail(f"LAB_TOPOLOGY is not JSON: {e}")
    if fields.get("nproc_per_node") == "gpu":
        import torch

        fields["nproc_per_node"] = torch.cuda.device_count()
        if not fields["nproc_per_node"]:
            fail('"nproc_per_node": "gpu" but this pod sees no GPU')
    # JSON has no tuples: the topology's tuple fields (script_wrapper, torchrun_extra) come back as lists.
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    try:
        return Topology(**fields)
    except (TypeError, TopologyError) as e:
        fail(f"LAB_TOPOLOGY: {e}")


def argv_from_env(env) -> list[str]:
    topology = topology_from_env(env)
    index = env.get("JOB_COMPLETION_INDEX")
    if index is None or not index.isdigit():
        fail("JOB_COMPLETION_INDEX is not set: run this in an Indexed Job's pod")
    workload = env.get("LAB_WORKLOAD", "trainer")
    script = workload if workload.endswith(".py") else script_path(workload)
    return topology.launch_argv(
        int(index), script, shlex.split(env.get("LAB_WORKLOAD_ARGS", "")), python=sys.executable
    )


def main() -> None:
    argv = argv_from_env(os.environ)
    print(f"[lab.node.k8s_pod] {shlex.join(argv)}", file=sys.stderr, flush=True)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
