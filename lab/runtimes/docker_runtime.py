"""The Docker runtime: one container per node on a user-defined bridge network.

    lab up --runtime docker [--image torchrun-lab:cpu]

Each node is a container named tlab-node<i> with hostname node<i>, on the network
tlab-net (subnet LAB_DOCKER_SUBNET, default 172.29.87.0/24; fixed addresses, so a
partitioned node comes back as itself). The c10d rendezvous is on node0. The run
directory is mounted into every container at its own path, so events, checkpoints,
logs and Prometheus' targets are where they are for the local runtime, and the
exercise engine reads them the same way. Prometheus runs in a container on the same
network, published on 127.0.0.1 only. `lab down` removes the containers and the
network labelled with this run directory, and nothing else.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import time
from dataclasses import asdict

from lab.errors import LabError
from lab.health import prometheus
from lab.rundir import RunDir
from lab.runtimes import docker_engine as engine
from lab.runtimes.base import run_dir_env
from lab.runtimes.docker_node import DockerNode, stop_all
from lab.runtimes.local_faults import WORKERS_FILE
from lab.topology import Topology

NETWORK = "tlab-net"
PROMETHEUS_CONTAINER = "tlab-prometheus"
SUBNET = os.environ.get("LAB_DOCKER_SUBNET", "172.29.87.0/24")


class DockerRuntime:
    name = "docker"

    def __init__(self, run_dir: RunDir, *, image: str | None = None, log=print, monitoring: str = "auto",
                 prometheus_port: int = 9090, **_ignored):
        self.run_dir, self.log = run_dir, log
        self.image = image or engine.NODE_IMAGE
        self.prometheus_mode = monitoring
        self.prometheus = prometheus.Prometheus(run_dir.path / "prometheus", port=prometheus_port)
        self._docker = None

    @property
    def docker(self):
        if self._docker is None:
            self._docker = engine.client()
        return self._docker

    def host_mode(self) -> str:
        return "containers"

    def node_env(self, node: DockerNode) -> dict[str, str]:
        return run_dir_env(self.run_dir.path, self.prometheus.targets_dir, node.dir, WORKERS_FILE)

    def plan(self, topology: Topology, mode: str = "containers", user: str = "") -> tuple[Topology, list[DockerNode]]:
        hosts = list(ipaddress.ip_network(SUBNET).hosts())
        if topology.nodes + 10 > len(hosts):
            raise LabError(f"LAB_DOCKER_SUBNET {SUBNET} is too small for {topology.nodes} nodes")
        nodes = [self._node(f"node{i}", i, str(hosts[10 + i]), self.image, user, topology.backend, self._docker)
                 for i in range(topology.nodes)]
        return topology.replace(rdzv_host="node0"), nodes

    def node_argv(self, topology: Topology, node: DockerNode, script: str, script_args: list[str]) -> list[str]:
        return topology.launch_argv(node.index, engine.in_image(script), script_args, python="python",
                                    log_dir=str(node.dir / "torchelastic"), extra_env=self.node_env(node))

    def up(self, topology: Topology, script: str, script_args: list[str]) -> tuple[Topology, list[DockerNode]]:
        if topology.rdzv_backend != "c10d":
            raise LabError("the docker runtime runs the c10d rendezvous on node0; use --rdzv-backend c10d")
        docker = self.docker
        engine.require_image(docker, self.image, engine.node_build_hint(self.image))
        note = engine.stale_image_note(docker, self.image)
        if note:
            self.log(note)
        watch = self.use_prometheus()
        self.run_dir.write_state({
            "runtime": self.name, "hosts": "containers", "image": self.image, "started_at": time.time(),
            "prometheus": self.prometheus.url if watch else None, "topology": asdict(topology),
            "script": script, "script_args": list(script_args),
        })
        user = engine.own_for_containers(self.run_dir.path, self.prometheus.targets_dir,
                                         *(self.run_dir.path / "nodes" / f"node{i}" for i in range(topology.nodes)))
        topology, nodes = self.plan(topology, user=user)
        for node in nodes:
            node.mounts.update(engine.script_mount(script))
        self.run_dir.write_state({**self.run_dir.read_state(), "user": user, "topology": asdict(topology),
                                  "nodes": [n.record() for n in nodes]})
        self.create_network()
        if watch:
            self.start_prometheus()
        for node in nodes:
            node.start(self.node_argv(topology, node, script, script_args))
        return topology, nodes

    def create_network(self) -> None:
        from docker.errors import APIError

        try:
            self.docker.networks.create(NETWORK, driver="bridge", labels={engine.LABEL: str(self.run_dir.path)},
                                        ipam=_ipam(SUBNET), check_duplicate=True)
        except APIError as e:
            raise LabError(f"cannot create the Docker network {NETWORK} on {SUBNET}: {e.explanation or e} "
                           "(another lab's? `lab down --run-dir` it; or set LAB_DOCKER_SUBNET)") from None

    def use_prometheus(self) -> bool:
        from docker.errors import ImageNotFound

        missing = None
        if self.prometheus_mode != "off":
            try:
                self.docker.images.get(engine.PROMETHEUS_IMAGE)
            except ImageNotFound:
                missing = f"image {engine.PROMETHEUS_IMAGE} not found: build it with `make images`"
        return prometheus.wanted(self.prometheus_mode, missing, self.log)

    def start_prometheus(self) -> None:
        """Prometheus on the lab's network, its config and the alert rules from the run directory."""
        rules = self.prometheus.dir / "rules.yml"
        self.prometheus.dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(prometheus.RULES, rules)
        self.prometheus.write_config(rules=rules)
        path = str(self.run_dir.path)
        container = self.docker.containers.run(
            engine.PROMETHEUS_IMAGE,
            [f"--config.file={self.prometheus.config_path}", "--storage.tsdb.path=/tmp/prometheus",
             "--web.listen-address=0.0.0.0:9090", "--log.level=warn"],
            name=PROMETHEUS_CONTAINER, hostname="prometheus", network=NETWORK, detach=True,
            labels={engine.LABEL: path}, volumes={path: {"bind": path, "mode": "ro"}},
            ports={"9090/tcp": ("127.0.0.1", self.prometheus.port)})
        self.prometheus.wait_ready(30, lambda: container.logs().decode(errors="replace"))
        self.log(f"started Prometheus in container {PROMETHEUS_CONTAINER} ({engine.PROMETHEUS_IMAGE})")

    def attach(self) -> list[DockerNode]:
        state = self.run_dir.read_state() or {}
        if state.get("runtime") != self.name or not state.get("nodes"):
            return []
        return [self._node(n["name"], n["index"], n["address"], state["image"], state.get("user", ""),
                           state["topology"]["backend"], self.docker)
                for n in state["nodes"]]

    def _node(self, name: str, index: int, address: str, image: str, user: str, backend: str, docker) -> DockerNode:
        """A node's handle: its container mounts the run directory at its own path."""
        path = str(self.run_dir.path)
        return DockerNode(name=name, index=index, address=address, dir=self.run_dir.path / "nodes" / name,
                          run_dir=path, network=NETWORK, image=image, user=user, gpus=backend == "nccl",
                          mounts={path: {"bind": path, "mode": "rw"}}, docker=docker)

    def down(self, grace_s: float = 10.0) -> list[str]:
        """Remove every container and network labelled with this run directory, then the run dir."""
        state = self.run_dir.read_state() or {}
        if state.get("runtime") not in (None, self.name):
            return []
        removed = []
        try:
            docker = self.docker
        except LabError as e:
            if state:  # a lab was started here: say what cannot be cleaned up
                self.log(f"note: {e}; the lab's containers, if any, are left to the daemon")
            docker = None
        if docker is not None:
            label = f"{engine.LABEL}={self.run_dir.path}"
            stop_all(self.attach(), grace_s)
            for container in docker.containers.list(all=True, filters={"label": label}):
                container.remove(force=True)
                removed.append(f"container {container.name}")
            for network in docker.networks.list(filters={"label": label}):
                network.remove()
                removed.append(f"network {network.name}")
        if self.run_dir.exists():
            removed.append(f"run dir {self.run_dir.path}")
            self.run_dir.remove()
        return removed


def _ipam(subnet: str):
    from docker.types import IPAMConfig, IPAMPool

    return IPAMConfig(pool_configs=[IPAMPool(subnet=subnet)])
