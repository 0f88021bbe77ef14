"""The Docker runtime: one container per node on a user-defined bridge network.

    lab up --runtime docker [--image torchrun-lab:cpu]

Each node is a container named tlab-<id>-node<i> (id: the run dir's lab id) with
hostname node<i>, on the network tlab-<id>-net (a /24 no other network uses, of
172.29.0.0/16 or, when a network covers all of that, of 10.229.0.0/16; or
LAB_DOCKER_SUBNET; fixed addresses, so a partitioned node comes back as itself). The
c10d rendezvous is on node0. The run-dir folders a node writes (its own node dir,
events, checkpoints, Prometheus' targets) are mounted into its container at their own
paths, so the exercise engine reads them as it does a local node's.
Containers are hardened: no capabilities, no new privileges, a pids limit, a read-only
root with a tmpfs /tmp. Prometheus runs in a container on the same network, published
on 127.0.0.1 only. `lab down` removes the containers and the network labelled with
this run directory, and nothing else.
"""

from __future__ import annotations

import ipaddress
import os

from lab import gpus
from lab.errors import LabError
from lab.rundir import RunDir
from lab.runtimes import docker_engine as engine
from lab.runtimes import docker_prometheus, fence, memory, subnets
from lab.runtimes.base import IMAGE, Log, Node
from lab.runtimes.docker_node import DockerNode, stop_all
from lab.runtimes.dry_run import plan_text
from lab.runtimes.monitored import MonitoredRuntime
from lab.runtimes.plan import LaunchPlan
from lab.topology import Topology

# The lab's networks take a free /24 of the first of these that has one. Docker's default
# address pools include 172.29.0.0/16: a network made without a subnet (compose's, a kind
# cluster's) can be given all of it, and then the lab moves on to a range no pool holds.
SUPERNETS = ("172.29.0.0/16", "10.229.0.0/16")
# What a node writes, under the run dir; each is mounted at its own path (see _node).
NODE_WRITES = ("events", "checkpoints", "reference", "work", "prometheus/targets")


class DockerRuntime(MonitoredRuntime):
    name = "docker"
    NODE = DockerNode
    OPTIONS = (IMAGE, *MonitoredRuntime.OPTIONS)
    DRILLS = True
    CHAOS = True
    DOCTOR = True
    NODES_ARE = "containers"
    RDZV_BACKENDS = ("c10d", "lab")  # node0's agent hosts either store on the lab's network
    NO_IN_PROCESS = ""  # node 0's keeper hosts the job's store on the lab's network, as its agent would

    def __init__(
        self,
        run_dir: RunDir,
        *,
        image: str | None = None,
        log: Log = print,
        monitoring: str = "auto",
        prometheus_port: int | None = None,
    ):
        super().__init__(run_dir, log=log, monitoring=monitoring, prometheus_port=prometheus_port)
        self.image = image or engine.NODE_IMAGE
        self._docker = None

    @property
    def network(self) -> str:
        return f"tlab-{self.run_dir.lab_id}-net"

    @property
    def prometheus_container(self) -> str:
        return f"tlab-{self.run_dir.lab_id}-prometheus"

    def subnet(self) -> str:
        """LAB_DOCKER_SUBNET, the one recorded at `up`, or a /24 no network of the daemon uses."""
        chosen = os.environ.get("LAB_DOCKER_SUBNET") or (self.run_dir.read_state() or {}).get("subnet")
        if chosen:
            return chosen
        taken: dict[str, list[ipaddress.IPv4Network]] = {}
        if self._docker is not None:
            for network in self._docker.networks.list():
                for pool in (network.attrs.get("IPAM") or {}).get("Config") or []:
                    try:
                        block = ipaddress.IPv4Network(pool.get("Subnet", ""), strict=False)
                    except ValueError:
                        continue
                    taken.setdefault(network.name, []).append(block)
        return str(subnets.free_block_among(SUPERNETS, taken, self.run_dir.lab_id, "LAB_DOCKER_SUBNET"))

    @property
    def docker(self):
        if self._docker is None:
            self._docker = engine.client()
        return self._docker

    def kill_prometheus(self) -> None:
        docker_prometheus.kill(self.docker, self.prometheus_container)

    def describe(self, node: Node) -> str:
        assert isinstance(node, DockerNode)
        return f"container {node.container_name}, image {node.image}"

    def plan(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        return self._plan(topology, script, script_args, user="", subnet=self.subnet())

    def _plan(self, topology: Topology, script: str, script_args: list[str], user: str, subnet: str) -> LaunchPlan:
        topology, nodes = self.layout(topology, user=user, subnet=subnet)
        for node in nodes:
            node.mounts.update(engine.script_mount(script))
        text = plan_text(self, topology, nodes, script, script_args)
        own = {"image": self.image, "lab_id": self.run_dir.lab_id, "subnet": subnet, "user": user}
        return LaunchPlan(self.name, "containers", topology, script, list(script_args), nodes, text, own=own)

    def layout(
        self, topology: Topology, user: str = "", subnet: str | None = None
    ) -> tuple[Topology, list[DockerNode]]:
        subnet = subnet or self.subnet()
        try:
            hosts = list(ipaddress.ip_network(subnet).hosts())
        except ValueError:
            raise LabError(f"LAB_DOCKER_SUBNET {subnet!r} is not an IPv4 network such as 172.29.87.0/24") from None
        if topology.nodes + 10 > len(hosts):
            raise LabError(f"Docker subnet {subnet} is too small for {topology.nodes} nodes")
        devices = gpus.assign(topology.nodes, topology.node_gpus, gpus.count())
        nodes = [
            self._node(f"node{i}", i, str(hosts[10 + i]), self.image, user, devices[i], self._docker)
            for i in range(topology.nodes)
        ]
        return topology.replace(rdzv_host="node0"), nodes

    def node_argv(self, topology: Topology, node: Node, script: str, script_args: list[str]) -> list[str]:
        return topology.launch_argv(
            node.index,
            engine.in_image(script),
            script_args,
            python="python",
            log_dir=str(node.dir / "torchelastic"),
            # The containers share this machine's cores when the daemon runs here.
            extra_env={**self.node_env(node), **(memory.threads_per_rank(topology) if daemon_is_local() else {})},
        )

    def prepare(self, topology: Topology, script: str, script_args: list[str]) -> LaunchPlan:
        if daemon_is_local():
            memory.check_fits(topology, "this Docker host")
        docker = self.docker
        engine.require_image(docker, self.image, engine.node_build_hint(self.image))
        engine.check_torch_build(docker, self.image, topology.backend, topology.node_gpus)
        note = engine.stale_image_note(docker, self.image)
        if note:
            self.log(note)
        watch = self.use_prometheus()
        if watch:
            self.claim_prometheus_port()
        # The folders the containers write, made and given to the image's user first.
        user = engine.own_for_containers(
            *(self.run_dir.path / d for d in NODE_WRITES),
            *(self.run_dir.path / "nodes" / f"node{i}" for i in range(topology.nodes)),
        )
        plan = self._plan(topology, script, script_args, user=user, subnet=self.subnet())
        plan.prometheus = self.prometheus.url if watch else None
        return plan

    def provision(self, plan: LaunchPlan) -> None:
        self.create_network()
        if plan.prometheus:
            self.start_prometheus()

    def create_network(self) -> None:
        from docker.errors import APIError

        try:
            self.docker.networks.create(
                self.network,
                driver="bridge",
                labels={engine.LABEL: str(self.run_dir.path)},
                ipam=_ipam(self.subnet()),
                check_duplicate=True,
            )
        except APIError as e:
            raise LabError(
                f"cannot create the Docker network {self.network} on {self.subnet()}: "
                f"{e.explanation or e} (another lab's? `lab down --run-dir` it; or set LAB_DOCKER_SUBNET)"
            ) from None

    def use_prometheus(self) -> bool:
        return docker_prometheus.wanted(self.docker, self.monitoring, self.log)

    def start_prometheus(self) -> None:
        path = str(self.run_dir.path)
        docker_prometheus.start(self.docker, self.prometheus, path, self.network, self.prometheus_container, self.log)

    def attach(self) -> list[DockerNode]:
        state = self.run_dir.read_state() or {}
        if state.get("runtime") != self.name or not state.get("nodes"):
            return []
        return [
            self._node(
                n["name"],
                n["index"],
                n["address"],
                state["image"],
                state.get("user", ""),
                n.get("gpus", []),
                self.docker,
            )
            for n in state["nodes"]
        ]

    def _node(self, name: str, index: int, address: str, image: str, user: str, gpu_ids: list, docker) -> DockerNode:
        """A node's handle: its container mounts the run-dir folders it writes, each at its own path."""
        node_dir = self.run_dir.path / "nodes" / name
        mounts = {
            str(d): {"bind": str(d), "mode": "rw"} for d in (node_dir, *(self.run_dir.path / w for w in NODE_WRITES))
        }
        return DockerNode(
            name=name,
            index=index,
            address=address,
            dir=node_dir,
            run_dir=str(self.run_dir.path),
            lab_id=self.run_dir.lab_id,
            network=self.network,
            image=image,
            user=user,
            gpu_ids=gpu_ids,
            mounts=mounts,
            docker=docker,
        )

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
        # A planted firewall's rule, should its drill have died before taking it back.
        removed += fence.remove(self.run_dir.lab_id)
        return removed + self.run_dir.take_down()


def _ipam(subnet: str):
    from docker.types import IPAMConfig, IPAMPool

    return IPAMConfig(pool_configs=[IPAMPool(subnet=subnet)])


def daemon_is_local() -> bool:
    """The Docker daemon runs on this machine (a unix socket): its containers share its memory and cores."""
    return os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")
