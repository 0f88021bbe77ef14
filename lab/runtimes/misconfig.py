"""The misconfigurations of a first multi-node run, planted on the lab's own hosts once they are up
and before anything runs on them: each declared once, with the node it is planted on, the node a
diagnosis should blame and the words it should use. `lab doctor`'s tests and `lab bench doctor`
(what torchrun does with each, beside what the doctor says) take them from here.

They work on netns hosts (each has its own hosts file, resolver and firewall) and, for those that
need only the environment or a port, on loopback hosts too. In containers (the docker runtime)
those of a hosts line or the environment are planted where Docker takes them, in the container's
creation; the others say why not (NOT_IN_CONTAINERS)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.errors import LabError
from lab.runtimes.netns import NETNS_ETC


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
    in_containers: Callable[[Any, int, ExitStack], None] | None = None  # the docker runtime's plant, if it has one

    def planter(self, runtime: str) -> Callable[[Any, int, ExitStack], None]:
        """How it is planted on the runtime's hosts ("local" or "docker"), or one line why it cannot be."""
        if runtime == "local":
            return self.plant
        if runtime == "docker" and self.in_containers is not None:
            return self.in_containers
        why = NOT_IN_CONTAINERS.get(self.name, "it is planted on the local runtime's hosts only")
        raise LabError(f"{self.name} cannot be planted on --runtime {runtime}: {why}; use --runtime local")

    def hosts_for(self, runtime: str) -> dict[str, str]:
        """What runtimes.create needs to bring up the hosts it is planted on (after planter's check)."""
        return {"hosts": self.hosts[0]} if runtime == "local" else {}

    def hosts_described(self, runtime: str) -> str:
        """Its hosts, in a few words: the local runtime's kind it is planted on, else HOSTS_OF's."""
        return f"{self.hosts[0]} hosts" if runtime == "local" else HOSTS_OF[runtime]

    def passes_on(self, runtime: str) -> bool:
        """Whether the lesson's job trains all the same with it, on that runtime's hosts (measured)."""
        return self.job_passes_in_containers if runtime == "docker" else self.job_passes

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


NOT_IN_CONTAINERS = {
    "hostname-unresolvable": "Docker writes each container's own name into its hosts file, and its DNS answers for it",
    "silent-dns": "Docker's own DNS answers for every container of the network, whatever resolver it is given",
    "firewall": "a container may not change its own firewall (no NET_ADMIN), and one set from outside lands "
    "after its first connection",
    "rendezvous-port-taken": "each container has a network of its own, so nothing else holds its port",
}
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
