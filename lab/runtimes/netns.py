"""Real hosts on one machine: a network namespace per node, joined by a bridge of the lab's own.

    host (root netns)                 tlab<id>b 10.213.<n>.1/24
                                     /                     \\
    netns tlab-<id>-node0: eth0 10.213.<n>.10 (node0)   netns tlab-<id>-node1: eth0 10.213.<n>.11 ...

Four things must be right for torchrun to work across them (measured, DESIGN.md):
- each node's hostname resolves to its own address (a UTS namespace per node plus
  /etc/netns/<ns>/hosts, which `ip netns exec` mounts over /etc/hosts), otherwise
  workers advertise 127.0.0.1 to their peers;
- which node hosts the c10d store is said explicitly (see Topology.torchrun_args);
- DNS must fail fast (see _create_host);
- once dockerd has run, the FORWARD policy is DROP and silently drops bridged
  traffic, so the lab accepts its bridge's own traffic (lab.runtimes.fence, which also
  keeps every other user of this machine away from the lab's ports).

Every name carries the lab id of the run dir (lab.rundir), and each lab takes a /24 of
10.213.0.0/16 that no interface uses yet: two labs run side by side, and a lab removes
its own namespaces, links, rules and /etc/netns dirs, never another's.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError
from lab.ownership import LAB_ID
from lab.runtimes import fence, subnets
from lab.runtimes.hostcmd import must, query

PREFIX = "tlab"  # every namespace and link of every lab starts with it
SUPERNET = ipaddress.ip_network("10.213.0.0/16")
NETNS_ETC = Path("/etc/netns")


@dataclass(frozen=True)
class Host:
    name: str  # the node's hostname, e.g. node0
    netns: str
    address: str
    interface: str = "eth0"


def unavailable_reason() -> str | None:
    """Why netns hosts cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "not running as root"
    for tool in ("ip", "unshare", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2 util-linux iptables)"
    return None


@dataclass(frozen=True)
class LabNet:
    """One lab's hosts: its bridge, subnet (10.213.<n>.0/24), namespaces and firewall rule."""

    lab_id: str
    subnet: str  # the first three octets, e.g. "10.213.7"

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.lab_id}b"

    @property
    def gateway(self) -> str:
        return f"{self.subnet}.1"

    def host(self, index: int) -> Host:
        return Host(
            name=f"node{index}", netns=f"{PREFIX}-{self.lab_id}-node{index}", address=f"{self.subnet}.{10 + index}"
        )

    def create(
        self, count: int, aliases: dict[int, list[str]] | None = None, own_aliases: dict[int, list[str]] | None = None
    ) -> list[Host]:
        """Build `count` hosts on a fresh bridge. On failure, remove what was made and raise.

        aliases: more names for host i, in every host's hosts file (a pod's DNS names, say);
        own_aliases: names for host i that only host i knows (a pod's bare hostname).
        """
        if count > 240:
            raise LabError(f"netns hosts: at most 240 nodes on one machine, got {count}")
        hosts = [self.host(i) for i in range(count)]
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            no_ipv6(self.bridge)
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            fence.install(self.lab_id, f"{self.subnet}.0/24", self.bridge)
            for i, host in enumerate(hosts):
                self._create_host(i, host, _hosts_file(hosts, i, aliases or {}, own_aliases or {}))
            if carried := ipv6_addresses(self.lab_id):
                raise LabError(f"netns hosts: an IPv6 address the fence would not cover: {carried[0]}")
        except BaseException:
            self.destroy()
            raise
        return hosts

    def _create_host(self, index: int, host: Host, hosts_file: str) -> None:
        outside, inside = f"{PREFIX}{self.lab_id}v{index}", f"{PREFIX}{self.lab_id}p{index}"
        _ip("netns", "add", host.netns)
        no_ipv6("all", host.netns)
        no_ipv6("default", host.netns)  # the veth moved in below takes the namespace's default
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        no_ipv6(outside)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("link", "set", inside, "netns", host.netns)
        in_ns = ("-n", host.netns)
        _ip(*in_ns, "link", "set", inside, "name", host.interface)
        _ip(*in_ns, "addr", "add", f"{host.address}/24", "dev", host.interface)
        _ip(*in_ns, "link", "set", host.interface, "up")
        _ip(*in_ns, "link", "set", "lo", "up")
        etc = NETNS_ETC / host.netns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(hosts_file)
        # No default route and no reachable DNS server: c10d reverse-resolves every peer
        # (as ::ffff:a.b.c.d, which /etc/hosts does not list), and a DNS server that cannot
        # answer costs 10 s per lookup. Asking loopback fails at once instead.
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")

    def leftovers(self) -> list[str]:
        """Everything of this lab's that exists now: netns, links, iptables rules, /etc/netns dirs."""
        return leftovers(self.lab_id)

    def destroy(self) -> list[str]:
        """Remove this lab's namespaces (and what runs in them), links, rules and config dirs. Idempotent."""
        return destroy(self.lab_id)


def for_lab(lab_id: str, subnet: str | None = None) -> LabNet:
    """The lab's network: its recorded subnet, or the first /24 of 10.213.0.0/16 no interface uses."""
    return LabNet(lab_id, subnet or free_subnet(lab_id))


def free_subnet(lab_id: str) -> str:
    """The first three octets of a /24 of SUPERNET that no interface of this machine is on."""
    taken: list[ipaddress.IPv4Network] = []
    if shutil.which("ip"):
        for line in query("ip", "-o", "-4", "addr", "show").splitlines():
            fields = line.split()
            if "inet" in fields:
                taken.append(ipaddress.IPv4Interface(fields[fields.index("inet") + 1]).network)
    block = subnets.free_block(str(SUPERNET), taken, lab_id)
    if block is None:
        raise LabError("netns hosts: every /24 of 10.213.0.0/16 is in use; `lab down` the labs you no longer need")
    return str(block.network_address).rsplit(".", 1)[0]


def _hosts_file(hosts: list[Host], viewer: int, aliases: dict, own_aliases: dict) -> str:
    lines = ["127.0.0.1 localhost"]
    for i, h in enumerate(hosts):
        names = " ".join([h.name, *aliases.get(i, []), *(own_aliases.get(i, []) if i == viewer else [])])
        # c10d reverse-resolves peers by their IPv4-mapped IPv6 form; list it to keep that quiet.
        lines += [f"{h.address} {names}", f"::ffff:{h.address} {names}"]
    return "\n".join(lines) + "\n"


def exec_prefix(host: Host) -> list[str]:
    """Run a command inside the host: its network namespace, and UTS and mount namespaces of its
    own (for its hostname, and for a /dev/shm of its own: see nodeproc --private-shm)."""
    return ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount", "--propagation", "private", "--"]


def leftovers(lab_id: str | None = None) -> list[str]:
    """What exists now of one lab (or of every lab, lab_id None): netns, links, rules, /etc/netns dirs."""
    found = [f"netns {ns}" for ns in _lab_namespaces(lab_id)]
    found += [f"link {link}" for link in _lab_links(lab_id)]
    found += [f"iptables rule {rule}" for rule in fence.find(lab_id)]
    found += [f"dir {d}" for d in _lab_etc_dirs(lab_id)]
    return found


def destroy(lab_id: str) -> list[str]:
    if not LAB_ID.fullmatch(lab_id):  # "" would name every lab's namespaces and links
        raise LabError(f"refusing to remove the hosts of lab id {lab_id!r}: not a lab id")
    removed = leftovers(lab_id)
    for ns in _lab_namespaces(lab_id):
        for pid in query("ip", "netns", "pids", ns).split():
            try:
                os.kill(int(pid), 9)  # in the lab's own namespace: the lab's own process
            except ProcessLookupError:
                pass
        query("ip", "netns", "del", ns)
    for link in _lab_links(lab_id):
        query("ip", "link", "del", link)
    if lab_id:
        fence.remove(lab_id)
    for d in _lab_etc_dirs(lab_id):
        shutil.rmtree(d, ignore_errors=True)
    return removed


def _ns_prefix(lab_id: str | None) -> str:
    return f"{PREFIX}-{lab_id}-" if lab_id else f"{PREFIX}-"


def _lab_namespaces(lab_id: str | None) -> list[str]:
    if shutil.which("ip") is None:
        return []
    names = [line.split()[0] for line in query("ip", "netns", "list").splitlines() if line.strip()]
    return [n for n in names if n.startswith(_ns_prefix(lab_id))]


def _lab_links(lab_id: str | None) -> list[str]:
    if shutil.which("ip") is None:
        return []
    out = query("ip", "-o", "link", "show")
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    if lab_id:
        return [n for n in names if n.startswith(f"{PREFIX}{lab_id}")]  # ids have one length: no prefix clash
    return [n for n in names if n.startswith(PREFIX) and not n.startswith(f"{PREFIX}-")]


def _lab_etc_dirs(lab_id: str | None) -> list[Path]:
    if not NETNS_ETC.exists():
        return []
    return sorted(d for d in NETNS_ETC.glob(f"{_ns_prefix(lab_id)}*") if not d.is_symlink())


def no_ipv6(interface: str, netns: str | None = None) -> None:
    """Give the interface (or "all"/"default" of a namespace) no IPv6 at all. The fence is
    iptables, IPv4 only; a link-local fe80:: address on the bridge let any local user reach
    node 0's store, which listens on every address of both families (found by attack). The
    lab's hosts talk IPv4 only, so carrying no IPv6 is simpler and surer than fencing it too."""
    if not Path("/proc/sys/net/ipv6").exists():
        return  # a kernel without IPv6: nothing to reach
    prefix = ["ip", "netns", "exec", netns] if netns else []
    must(*prefix, "sh", "-c", f"echo 1 > /proc/sys/net/ipv6/conf/{interface}/disable_ipv6")


def ipv6_addresses(lab_id: str) -> list[str]:
    """Every IPv6 address on the lab's links and in its namespaces: none, while the lab is whole."""
    found = [
        line
        for link in _lab_links(lab_id)
        for line in query("ip", "-o", "-6", "addr", "show", "dev", link).splitlines()
    ]
    for ns in _lab_namespaces(lab_id):
        found += [f"{ns}: {line}" for line in query("ip", "-n", ns, "-o", "-6", "addr", "show").splitlines()]
    return found


def _ip(*args: str) -> None:
    must("ip", *args)
