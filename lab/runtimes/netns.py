"""Real hosts on one machine: a network namespace per node, joined by a lab bridge.

    host (root netns)                 tlab-br 10.213.0.1/24
                                     /                     \\
    netns tlab-node0: eth0 10.213.0.10  (hostname node0)   netns tlab-node1: eth0 10.213.0.11 ...

Four things must be right for torchrun to work across them (measured, DESIGN.md):
- each node's hostname resolves to its own address (a UTS namespace per node plus
  /etc/netns/<ns>/hosts, which `ip netns exec` mounts over /etc/hosts), otherwise
  workers advertise 127.0.0.1 to their peers;
- which node hosts the c10d store is said explicitly (see Topology.torchrun_args);
- DNS must fail fast (see _create_host);
- once dockerd has run, the FORWARD policy is DROP and silently drops bridged
  traffic, so the lab inserts an ACCEPT rule for its bridge.

Everything here is named tlab-* (the iptables rule carries the comment
"torchrun-lab"), so `destroy_all` finds leftovers after a crash.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError

PREFIX = "tlab-"
BRIDGE = "tlab-br"
SUBNET = "10.213.0"
GATEWAY = f"{SUBNET}.1"
RULE_COMMENT = "torchrun-lab"
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
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2 util-linux)"
    return None


def host_for(index: int) -> Host:
    return Host(name=f"node{index}", netns=f"{PREFIX}node{index}", address=f"{SUBNET}.{10 + index}")


def create(count: int, aliases: dict[int, list[str]] | None = None,
           own_aliases: dict[int, list[str]] | None = None) -> list[Host]:
    """Build `count` hosts on a fresh bridge. On failure, remove what was made and raise.

    aliases: more names for host i, in every host's hosts file (a pod's DNS names, say);
    own_aliases: names for host i that only host i knows (a pod's bare hostname).
    """
    hosts = [host_for(i) for i in range(count)]
    try:
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        _allow_bridge_forwarding()
        for i, host in enumerate(hosts):
            _create_host(i, host, _hosts_file(hosts, i, aliases or {}, own_aliases or {}))
    except BaseException:
        destroy_all()
        raise
    return hosts


def _hosts_file(hosts: list[Host], viewer: int, aliases: dict, own_aliases: dict) -> str:
    lines = ["127.0.0.1 localhost"]
    for i, h in enumerate(hosts):
        names = " ".join([h.name, *aliases.get(i, []), *(own_aliases.get(i, []) if i == viewer else [])])
        # c10d reverse-resolves peers by their IPv4-mapped IPv6 form; list it to keep that quiet.
        lines += [f"{h.address} {names}", f"::ffff:{h.address} {names}"]
    return "\n".join(lines) + "\n"


def _create_host(index: int, host: Host, hosts_file: str) -> None:
    outside, inside = f"{PREFIX}v{index}", f"{PREFIX}p{index}"
    _ip("netns", "add", host.netns)
    _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
    _ip("link", "set", outside, "master", BRIDGE)
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


def exec_prefix(host: Host) -> list[str]:
    """Run a command inside the host: its network namespace and a UTS namespace of its own."""
    return ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--"]


def _allow_bridge_forwarding() -> None:
    if shutil.which("iptables") is None:
        return  # no firewall tool, so nothing of ours can be dropping the bridge's traffic
    _run("iptables", "-w", "-I", "FORWARD", "1", "-i", BRIDGE, "-o", BRIDGE,
         "-m", "comment", "--comment", RULE_COMMENT, "-j", "ACCEPT")


def leftovers() -> list[str]:
    """Everything of the lab's that exists now: netns, links, iptables rules, /etc/netns dirs."""
    found = [f"netns {ns}" for ns in _lab_namespaces()]
    found += [f"link {link}" for link in _lab_links()]
    found += [f"iptables rule {rule}" for rule in _lab_rules()]
    if NETNS_ETC.exists():
        found += [f"dir {d}" for d in sorted(NETNS_ETC.glob(f"{PREFIX}*"))]
    return found


def destroy_all() -> list[str]:
    """Remove every lab namespace (and what runs in it), link, rule and config dir. Idempotent."""
    removed = leftovers()
    for ns in _lab_namespaces():
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for link in _lab_links():
        subprocess.run(["ip", "link", "del", link], capture_output=True)
    for rule in _lab_rules():
        subprocess.run(["iptables", "-w", "-D", *rule.split()[1:]], capture_output=True)
    if NETNS_ETC.exists():
        for d in NETNS_ETC.glob(f"{PREFIX}*"):
            shutil.rmtree(d, ignore_errors=True)
    return removed


def _lab_namespaces() -> list[str]:
    if shutil.which("ip") is None:
        return []
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def _lab_links() -> list[str]:
    if shutil.which("ip") is None:
        return []
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if n.startswith(PREFIX)]


def _lab_rules() -> list[str]:
    if shutil.which("iptables") is None:
        return []
    out = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if f"--comment {RULE_COMMENT}" in line]


def _ip(*args: str) -> None:
    _run("ip", *args)


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed: {result.stderr.strip() or result.returncode}")
