"""The misconfigurations of a first multi-node run, planted on the lab's own hosts once they are up
and before anything runs on them: each declared once, with the node it is planted on, the node a
diagnosis should blame and the words it should use. `lab doctor`'s tests and `lab bench doctor`
(what torchrun does with each, beside what the doctor says) take them from here.

They work on netns hosts (each has its own hosts file, resolver and firewall) and, for those that
need only the environment or a port, on loopback hosts too. In containers (the docker runtime)
those of a hosts line or the environment are planted where Docker takes them, in the container's
creation, and the firewall as a rule on the Docker host's DOCKER-USER chain before the container
starts (root); the others say why not (NOT_IN_CONTAINERS)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.errors import LabError
from lab.runtimes import fence
from lab.runtimes.docker_runtime import daemon_is_local
from lab.runtimes.hostcmd import TIMEOUT_S, must, query
from lab.runtimes.netns import NETNS_ETC

LOCAL = "use --runtime local"


@dataclass(frozen=True)
class Misconfig:
    name: str
    what: str  # the mistake, in a user's words
    hosts: tuple[str, ...]  # the local runtime's host kinds it can be planted on
    plant: Callable[[Any, int, ExitStack], None]  # (plan, node index, what undoes it)
    says: str  # words the doctor's finding about the blamed node holds
    # Whom a finding should be about: the node it is planted on, a "peer" meeting it, the "store" host.
    blames: str = "node"
    on_store: bool = True  # it may be planted on node 0, the rendezvous host
    job_passes: bool = False  # measured (lab bench doctor): torch 2.13's gloo copes, the lesson's job passes
    job_passes_in_containers: bool = False  # the same, measured on the docker runtime
    passes_in_containers_because: str = ""  # why it does there, where that is not gloo coping
    in_containers: Callable[[Any, int, ExitStack], None] | None = None  # the docker runtime's plant, if it has one
    # What this machine lacks for the docker plant ("" when nothing): asked before anything starts.
    containers_lack: Callable[[], str] = lambda: ""

    def planter(self, runtime: str) -> Callable[[Any, int, ExitStack], None]:
        """How it is planted on the runtime's hosts ("local" or "docker"), or one line why it cannot be."""
        if runtime == "local":
            return self.plant
        if runtime == "docker" and self.in_containers is not None:
            lacking = self.containers_lack()
            if lacking:
                raise LabError(f"{self.name} cannot be planted on --runtime docker here: {lacking}; {LOCAL}")
            return self.in_containers
        why = NOT_IN_CONTAINERS.get(self.name, "it is planted on the local runtime's hosts only")
        raise LabError(f"{self.name} cannot be planted on --runtime {runtime}: {why}; {LOCAL}")

    def hosts_for(self, runtime: str) -> dict[str, str]:
        """What runtimes.create needs to bring up the hosts it is planted on (after planter's check)."""
        return {"hosts": self.hosts[0]} if runtime == "local" else {}

    def hosts_described(self, runtime: str) -> str:
        """Its hosts, in a few words: the local runtime's kind it is planted on, else HOSTS_OF's."""
        return f"{self.hosts[0]} hosts" if runtime == "local" else HOSTS_OF[runtime]

    def passes_on(self, runtime: str) -> bool:
        """Whether the lesson's job trains all the same with it, on that runtime's hosts (measured)."""
        return self.job_passes_in_containers if runtime == "docker" else self.job_passes

    def why_it_passes(self, runtime: str) -> str:
        """Why the job trains all the same on that runtime's hosts (where passes_on says it does)."""
        return (runtime == "docker" and self.passes_in_containers_because) or "torch 2.13's gloo copes"

    def blamed(self, index: int, nodes: int) -> str:
        """The node a finding about it names (the next one, for a peer: every peer meets it)."""
        return {"node": f"node{index}", "peer": f"node{(index + 1) % nodes}", "store": "node0"}[self.blames]


def _etc(plan: Any, index: int) -> Path:
    return NETNS_ETC / plan.nodes[index].netns


def _prepend_hosts_line(line: str) -> Callable[[Any, int, ExitStack], None]:
    def plant(plan: Any, index: int, undo: ExitStack) -> None:
        hosts = _etc(plan, index) / "hosts"
        hosts.write_text(line.format(node=plan.nodes[index].name, store=plan.nodes[0].name) + "\n" + hosts.read_text())

    return plant


def _without(plan: Any, index: int, name: str) -> list[str]:
    """The node's hosts file, less every line that names `name`."""
    return [line for line in (_etc(plan, index) / "hosts").read_text().splitlines() if name not in line.split()[1:]]


def _unresolvable_hostname(plan: Any, index: int, undo: ExitStack) -> None:
    (_etc(plan, index) / "hosts").write_text("\n".join(_without(plan, index, plan.nodes[index].name)) + "\n")


def _rendezvous_on_localhost(plan: Any, index: int, undo: ExitStack) -> None:
    """The rendezvous host's name, on this node, for 127.0.0.1 alone (with its real address listed
    too, torch's store client tries that next and the job goes on)."""
    store = plan.nodes[0].name
    (_etc(plan, index) / "hosts").write_text("\n".join([f"127.0.0.1 {store}", *_without(plan, index, store)]) + "\n")


def _firewall(plan: Any, index: int, undo: ExitStack) -> None:
    """New TCP connections into the node dropped (its namespace's own firewall, gone with it)."""
    subprocess.run(
        ["ip", "netns", "exec", plan.nodes[index].netns, "iptables", "-A", "INPUT", "-p", "tcp", "--syn", "-j", "DROP"],
        check=True,
        capture_output=True,
    )


def _silent_dns(plan: Any, index: int, undo: ExitStack) -> None:
    """The node's peers left out of its hosts file, and a DNS server that never answers: a UDP
    socket on the lab's side of the bridge, held until the plant is undone."""
    node = plan.nodes[index]
    gateway = node.address.rsplit(".", 1)[0] + ".1"
    silent = undo.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    silent.bind((gateway, 53))
    (_etc(plan, index) / "hosts").write_text(f"127.0.0.1 localhost\n{node.address} {node.name}\n")
    (_etc(plan, index) / "resolv.conf").write_text(f"nameserver {gateway}\noptions timeout:2 attempts:1\n")


def _environment(variable: str, value: str) -> Callable[[Any, int, ExitStack], None]:
    """Set for every node (the nodes' agents inherit the lab's environment), put back after."""

    def plant(plan: Any, index: int, undo: ExitStack) -> None:
        before = os.environ.get(variable)
        os.environ[variable] = value
        undo.callback(lambda: os.environ.pop(variable) if before is None else os.environ.update({variable: before}))

    return plant


def _taken_port(plan: Any, index: int, undo: ExitStack) -> None:
    """Something else on this machine listens on the rendezvous port (loopback hosts share it)."""
    busy = undo.enter_context(socket.socket())
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    busy.bind(("0.0.0.0", plan.topology.rdzv_port))
    busy.listen()


def _container_hosts_line(address: str, name: str) -> Callable[[Any, int, ExitStack], None]:
    """A line of the node's container's hosts file, ahead of the one Docker writes for its own name;
    the container is made with it (DockerNode.extra_hosts), so nothing is left to undo."""

    def plant(plan: Any, index: int, undo: ExitStack) -> None:
        node = plan.nodes[index]
        node.extra_hosts[name.format(node=node.name, store=plan.nodes[0].name)] = address

    return plant


def _container_environment(variable: str, value: str) -> Callable[[Any, int, ExitStack], None]:
    """Set in every node's container, as one exported on every machine of a cluster would be."""

    def plant(plan: Any, index: int, undo: ExitStack) -> None:
        for node in plan.nodes:
            node.environment[variable] = value

    return plant


def _container_firewall(plan: Any, index: int, undo: ExitStack) -> None:
    """New TCP connections into the node's container dropped on the Docker host, before it starts:
    Docker's FORWARD chain asks DOCKER-USER first, for its bridges' own traffic too. The rule
    carries the lab's tag (lab.runtimes.fence), so `lab down` removes it should this undo not run."""
    node = plan.nodes[index]
    tag = ["-m", "comment", "--comment", fence.comment(node.lab_id)]
    rule = ["DOCKER-USER", "-d", f"{node.address}/32", "-p", "tcp", "--syn", *tag, "-j", "DROP"]
    must("iptables", "-w", str(TIMEOUT_S), "-I", rule[0], "1", *rule[1:])
    undo.callback(query, "iptables", "-w", str(TIMEOUT_S), "-D", *rule)


def _docker_host_firewall_lacking() -> str:
    """Why a rule cannot be set on the Docker host's DOCKER-USER chain from here ("" when it can)."""
    if not daemon_is_local():
        return "the Docker daemon runs on another machine, whose firewall the lab does not set"
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        return "it is a rule in the Docker host's DOCKER-USER chain, which needs root and iptables"
    if query("iptables", "-w", str(TIMEOUT_S), "-S", "DOCKER-USER") == "":
        return "the Docker host has no DOCKER-USER chain (dockerd runs with --iptables=false?)"
    return ""


NOT_IN_CONTAINERS = {
    "hostname-unresolvable": "Docker writes each container's own name into its hosts file, and its DNS answers for it",
    "silent-dns": "Docker's own DNS answers for every container of the network, whatever resolver it is given",
    "rendezvous-port-taken": "each container has a network of its own, so nothing else holds its port",
}
# Measured in containers, where only the nodes' traffic to each other passes the host's firewall
# (on netns hosts the node's own INPUT chain drops its local ranks' connections to each other too).
GLOO_CONNECTS_DOWN = (
    "gloo connects each pair of ranks from the higher address to the lower, and the store is node 0's: "
    "nothing connects into node 1, the highest"
)
PLANTED_ON_RUNTIMES = ("local", "docker")  # what a misconfiguration drill's --runtime takes
HOSTS_OF = {"local": "netns hosts (loopback ones for a port)", "docker": "Docker containers"}
NETNS = ("netns",)
MISCONFIGS = {
    m.name: m
    for m in (
        Misconfig(
            "hostname-on-loopback", "the node's hostname resolves to 127.0.1.1 (Debian's /etc/hosts)", NETNS,
            _prepend_hosts_line("127.0.1.1 {node}"), "resolves to 127.0.1.1 (loopback) first", job_passes=True,
            in_containers=_container_hosts_line("127.0.1.1", "{node}"),
        ),
        Misconfig(
            "hostname-unresolvable", "the node's hostname is in no hosts file and no DNS", NETNS,
            _unresolvable_hostname, "does not resolve", job_passes=True,
        ),
        Misconfig(
            "firewall", "the node drops new TCP connections", NETNS, _firewall, "cannot reach", blames="peer",
            in_containers=_container_firewall, containers_lack=_docker_host_firewall_lacking,
            job_passes_in_containers=True, passes_in_containers_because=GLOO_CONNECTS_DOWN,
        ),
        Misconfig(
            "silent-dns", "the node's hosts file lacks its peers and its DNS server never answers", NETNS,
            _silent_dns, "looking up the name of",
        ),
        Misconfig(
            "rendezvous-on-localhost", "the rendezvous host resolves to 127.0.0.1 on the node", NETNS,
            _rendezvous_on_localhost, "it would rendezvous alone", on_store=False,
            in_containers=_container_hosts_line("127.0.0.1", "{store}"),
        ),
        Misconfig(
            "interface-missing", "GLOO_SOCKET_IFNAME names an interface the nodes lack", ("netns", "loopback"),
            _environment("GLOO_SOCKET_IFNAME", "eth9"), "GLOO_SOCKET_IFNAME=eth9 names no interface",
            in_containers=_container_environment("GLOO_SOCKET_IFNAME", "eth9"),
        ),
        Misconfig(
            "interface-loopback", "GLOO_SOCKET_IFNAME names the loopback interface", NETNS,
            _environment("GLOO_SOCKET_IFNAME", "lo"), "connectFullMesh fails",
            in_containers=_container_environment("GLOO_SOCKET_IFNAME", "lo"),
        ),
        Misconfig(
            "rendezvous-port-taken", "another program holds the rendezvous port", ("loopback",), _taken_port,
            "the rendezvous port is already in use", blames="store",
        ),
    )
}  # fmt: skip
