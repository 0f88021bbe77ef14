"""Ports loopback nodes share with everything else on the machine: checked free before a lab starts."""

from __future__ import annotations

import random
import socket

from lab import procs
from lab.errors import LabError
from lab.rundir import MARKER
from lab.topology import Topology


def exporter_ports(topology: Topology) -> list[int]:
    agents = range(topology.agent_metrics_port, topology.agent_metrics_port + topology.nodes)
    ranks = range(topology.rank_metrics_port, topology.rank_metrics_port + topology.world_size)
    return [*(agents if topology.agent_metrics_port else []), *(ranks if topology.rank_metrics_port else [])]


def port_free(host: str, port: int) -> bool:
    """Nothing listens on host:port (on 0.0.0.0: on no address at all)."""
    with socket.socket() as s:
        # As servers do: a port whose old connections linger in TIME_WAIT is still free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class PortInUse(LabError):
    """A port the lab needs is taken; `option` names the flag that picks another."""

    def __init__(self, host: str, port: int, what: str, option: str):
        super().__init__(f"{what} {host}:{port} is already in use{holder(port)}; pick another with {option}")
        self.port, self.option = port, option


def ensure_port_free(host: str, port: int, what: str, option: str) -> None:
    if not port_free(host, port):
        raise PortInUse(host, port, what, option)


def free_etcd_port(port: int, tries: int = 50) -> int:
    """The first port from `port` on where the lab's etcd can serve clients (on any address: it
    listens on the host's side of the lab's network, where other labs' loopback listeners are)
    with its peer port above it free on 127.0.0.1."""
    for candidate in range(port, min(port + 2 * tries, 65535), 2):
        if port_free("0.0.0.0", candidate) and port_free("127.0.0.1", candidate + 1):
            return candidate
    raise LabError(f"no free pair of ports for etcd from {port} on{holder(port)}; pick one with --rdzv-port")


def holder(port: int) -> str:
    """Who listens on port, as far as /proc tells: a lab (by its run dir), another program, or nobody known."""
    pids = procs.listener_pids(port)
    labs = sorted({procs.environ(pid).get(MARKER, "") for pid in pids} - {""})
    if labs:
        return f" (by the lab running in {', '.join(labs)})"
    if pids:
        return f" (by {', '.join(f'{_name(pid)} pid {pid}' for pid in sorted(pids))}, not a lab)"
    return ""


def _name(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        return "a process"


# Ports are picked above the kernel's range for outgoing connections' source ports: one picked
# inside it (as bind(0) picks) was once taken by a connection before the lab bound it, and a
# CI run's diagnosis bench refused "rendezvous port 0.0.0.0:38221 is already in use".
PORT_CEILING = 65000  # room above for a block of ports (overhead.free_port_block)


def free_port() -> int:
    """A TCP port nothing listens on now, on every address, outside the kernel's ephemeral range."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_top = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        ephemeral_top = PORT_CEILING
    for _ in range(200):
        port = random.randrange(ephemeral_top + 1, PORT_CEILING) if ephemeral_top + 1 < PORT_CEILING else 0
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue  # taken: another pick
            return s.getsockname()[1]
    raise OSError("no free TCP port above the ephemeral range")
