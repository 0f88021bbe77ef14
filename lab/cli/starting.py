"""Bringing a job up, shared by `lab up` and `lab run`: check, plan or start, and clean up on failure."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from lab import gpus, runtimes
from lab.cli.options import run_dir_from_args, topology_from_args
from lab.errors import LabError
from lab.node.launch import lab_environment


def resolve_script(script: str) -> str:
    path = Path(script)
    if not path.is_file():
        raise LabError(f"script not found: {script}")
    return str(path.resolve())


def start(args: argparse.Namespace, script: str, script_args: list[str], log=print):
    """Start the job; returns (runtime, topology, nodes), or None after a dry run."""
    topology = topology_from_args(args)
    script = resolve_script(script)
    runtime = runtimes.create(args.runtime, run_dir_from_args(args), hosts=args.hosts, log=log,
                              monitoring=args.prometheus, prometheus_port=args.prometheus_port,
                              context=args.context, namespace=args.namespace, overlay=args.overlay,
                              image=args.image, ray_address=args.ray_address)
    if args.dry_run and runtime.name == "k8s":
        print(runtime.plan_manifests(topology, script, script_args), end="")
        return None
    if args.dry_run:
        print_plan(runtime, topology, script, script_args)
        return None
    runtimes.refuse_if_running(runtime, log)
    try:
        topology, nodes = runtime.up(topology, script, script_args)
    except BaseException:
        runtime.down(grace_s=2.0)
        raise
    for node in nodes:
        where = f"netns {node.netns}" if getattr(node, "netns", None) else (
            {"k8s": "pod", "docker": "container", "ray": "Ray machine"}.get(runtime.name, "loopback"))
        log(f"started {node.name} at {node.address} ({where}), {topology.nproc_per_node} workers; log {node.log_path}")
    return runtime, topology, nodes


def print_plan(runtime, topology, script: str, script_args: list[str]) -> None:
    topology, nodes = runtime.plan(topology, runtime.host_mode())
    devices = gpus.assign(topology.nodes, topology.node_gpus, gpus.count())
    for node in nodes:
        netns = getattr(node, "netns", None)
        where = f"netns {netns}, hostname {node.name}" if netns else (
            f"container {node.container_name}, image {node.image}" if runtime.name == "docker" else "loopback")
        print(f"# {node.name}: {node.address} ({where})")
        if devices[node.index]:
            print(f"#   gpus {','.join(map(str, devices[node.index]))} of this machine's {gpus.count()} "
                  "(CUDA_VISIBLE_DEVICES; a container's device_ids)")
        env = lab_environment({**topology.env(node.index), **runtime.node_env(node)}, topology.torch_defaults)
        for name, value in sorted(env.items()):
            print(f"#   env {name}={value}  (set by lab.node.launch unless you set it)")
        argv = runtime.node_argv(topology, node, script, script_args)
        if hasattr(node, "wrapper"):
            print(f"#   wrapped in: {shlex.join(node.wrapper())} --")
        print(shlex.join(argv))
