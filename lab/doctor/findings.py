"""What is wrong for a multi-node job, from what each node's probe reported (lab.node.doctor_probe):
one line per finding, naming the node, what torchrun would meet, and the fix. Pure: the tests
give it recorded reports."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

SLOW_LOOKUP_S = 1.0  # c10d looks up every peer's name: a slow lookup is paid per connection
NCCL_SHM_BYTES = 512 << 20  # nccl's shared-memory transport fails in Docker's default 64 MB
MIN_NOFILE = 1024


@dataclass(frozen=True)
class Finding:
    node: str  # the node it is about ("" for all of them)
    what: str
    fix: str
    note: bool = False  # worth knowing, but measured not to stop a job (lab bench doctor): exit 0

    def line(self) -> str:
        return f"{'note: ' if self.note else ''}{self.node + ': ' if self.node else ''}{self.what}: {self.fix}"


def is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback  # a scope (::1%lo) is read too
    except ValueError:
        return False


def findings(
    nodes: list[str], facts: dict[str, dict], reach: dict[str, dict], backend: str, in_containers: bool = False
) -> list[Finding]:
    """Every finding, node by node, in the order a job meets them (names, then the network).
    in_containers: the nodes are Docker containers, where a hostname on loopback breaks gloo."""
    found = [Finding(n, "its probe did not report", "see its log in the run dir") for n in nodes if n not in facts]
    for node in nodes:
        if node in facts:
            found += own_findings(facts[node], backend)
    found += peer_findings(facts, reach, in_containers)
    found += rendezvous_findings(facts, reach)
    found.sort(key=lambda f: (len(f.node), f.node))  # node2 before node10
    versions = {f["torch"] for f in facts.values()}
    if len(versions) > 1:
        each = ", ".join(f"{f['torch'] or 'none'} on {n}" for n, f in sorted(facts.items()))
        found.append(Finding("", f"torch differs between the nodes ({each})", "install the same torch on every node"))
    return found


def own_findings(facts: dict, backend: str) -> list[Finding]:
    node, found = facts["node"], []
    for variable, value in facts["ifnames"].items():
        missing = [name for name in value.split(",") if name not in facts["interfaces"]]
        if missing:
            found.append(
                Finding(
                    node,
                    f"{variable}={value} names no interface here (it has {', '.join(facts['interfaces'])})",
                    "name the interface that reaches the other nodes, or unset it",
                )
            )
    if facts["hostname_error"] and "GLOO_SOCKET_IFNAME" not in facts["ifnames"]:
        found.append(  # a note: the lesson's gloo job passes so (lab bench doctor)
            Finding(
                node,
                f"its hostname {facts['hostname']} does not resolve ({facts['hostname_error']}): a program that "
                "looks up its own name fails (torch's gloo picks an address without it)",
                "list the hostname in /etc/hosts with the address the other nodes reach",
                note=True,
            )
        )
    if facts["advertised"] is None and not found and not facts["hostname_error"]:
        found.append(
            Finding(
                node,
                f"none of the addresses its hostname {facts['hostname']} resolves to "
                f"({', '.join(facts['hostname_addresses'])}) is one of its own: gloo cannot listen there",
                "make the hostname resolve to this node's address (/etc/hosts), or set GLOO_SOCKET_IFNAME",
            )
        )
    if backend == "nccl" and facts["shm_bytes"] is not None and facts["shm_bytes"] < NCCL_SHM_BYTES:
        found.append(
            Finding(
                node,
                f"/dev/shm is {facts['shm_bytes'] >> 20} MiB: nccl's shared-memory transport needs more",
                "give it 1 GiB or more (docker run --shm-size=1g; in Kubernetes an emptyDir of medium Memory)",
            )
        )
    if facts["nofile"] < MIN_NOFILE:
        found.append(
            Finding(
                node,
                f"its open-file limit is {facts['nofile']}: every peer connection and worker pipe takes one",
                f"raise it to {MIN_NOFILE} or more (ulimit -n, or the container's nofile limit)",
            )
        )
    return found


def peer_findings(facts: dict[str, dict], reach: dict[str, dict], in_containers: bool = False) -> list[Finding]:
    """A node its peers cannot reach at the address it gives them, and slow reverse lookups. A
    loopback address is one finding, about the node that gives it, whichever peers met it."""
    found, loopback = [], set()
    for source, record in sorted(reach.items()):
        for peer, tried in sorted(record["peers"].items()):
            info = facts.get(peer, {})
            address, port = info.get("advertised"), info.get("port")
            if address is None:
                continue  # no address to give: its own finding says why
            if tried["connect"] != "ok" and is_loopback(address):
                if peer in loopback:
                    continue
                loopback.add(peer)
                found.append(_loopback(peer, info, source, tried["connect"], in_containers))
            elif tried["connect"] != "ok":
                found.append(
                    Finding(
                        source,
                        f"cannot reach {peer} at {address}:{port} ({tried['connect']})",
                        "a firewall or a route between them: allow TCP between the nodes on every port above 1024",
                    )
                )
            if tried["lookup_s"] is not None and tried["lookup_s"] > SLOW_LOOKUP_S:
                found.append(
                    Finding(
                        source,
                        f"looking up the name of {peer}'s address {address} took {tried['lookup_s']:.1f} s, "
                        "paid on every connection",
                        "list the nodes in /etc/hosts, or fix the DNS server in /etc/resolv.conf",
                    )
                )
    return found


def rendezvous_findings(facts: dict[str, dict], reach: dict[str, dict]) -> list[Finding]:
    store = next((f for f in facts.values() if f["index"] == 0), None)
    found = []
    if store is not None and store["rdzv_port_free"] is False:
        found.append(
            Finding(store["node"], "the rendezvous port is already in use there", "pick another with --rdzv-port")
        )
    for node, record in sorted(reach.items()):
        if record["rdzv_error"]:
            found.append(
                Finding(
                    node,
                    f"the rendezvous host does not resolve ({record['rdzv_error']})",
                    "give --rdzv-host a name every node resolves, or node 0's address",
                )
            )
        elif record["rdzv_connect"] not in ("ok",) and not record["rdzv_connect"].startswith("not tried"):
            address = record["rdzv_addresses"][0]
            alone = is_loopback(address) and store is not None and facts[node]["net_ns"] != store["net_ns"]
            found.append(
                Finding(
                    node,
                    f"the rendezvous host resolves to {address}"
                    + (", itself: it would rendezvous alone (a world of its own, or a hang)" if alone else "")
                    + f", and the store cannot be reached there ({record['rdzv_connect']})",
                    "give the rendezvous node 0's address, one every node reaches",
                )
            )
    return found


def _loopback(node: str, info: dict, source: str, error: str, in_containers: bool = False) -> Finding:
    """A node that would give its peers a loopback address. Named by GLOO_SOCKET_IFNAME, gloo gives
    it and the job fails in connectFullMesh; only its hostname's, torch's gloo gives another one on
    netns hosts, and the lesson's job passes (both measured: lab bench doctor), so that is a note.
    In Docker containers gloo gives the hostname's loopback address, and the job fails in 7 s
    (measured: `lab exercise run hostname-on-loopback --runtime docker`): there it is a finding."""
    address = info["advertised"]
    if info["advertised_from"] != "hostname":  # GLOO_SOCKET_IFNAME=lo
        return Finding(
            node,
            f"it gives its peers {address} ({info['advertised_from']}: loopback), where {source} cannot reach it "
            f"({error}): gloo's connectFullMesh fails",
            "set GLOO_SOCKET_IFNAME to the interface that reaches the other nodes, not loopback",
        )
    cut_off = (
        "gloo gives its peers that address and connectFullMesh fails"
        if in_containers
        else "a program that listens on its hostname's address is cut off (torch's gloo picks another)"
    )
    return Finding(
        node,
        f"its hostname {info['hostname']} resolves to {address} (loopback) first, where {source} cannot reach it "
        f"({error}): {cut_off}",
        f"make {info['hostname']} resolve to the address the other nodes reach (/etc/hosts)",
        note=not in_containers,
    )
