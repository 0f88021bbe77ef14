"""lab doctor's judgement on what the probes report (lab.doctor.findings), from reports as
lab.node.doctor_probe writes them: a healthy lab of any size finds nothing; each misconfiguration
is one line about the node at fault, whichever node, and whichever peers met it."""

from __future__ import annotations

import pytest

from lab.doctor.findings import findings, is_loopback


def healthy(count: int, shared_netns: bool = False) -> tuple[list[str], dict, dict]:
    """Reports of `count` nodes on a subnet, each in its own network namespace (netns, docker) or
    all in one (loopback hosts, where every address is loopback and reaches everyone)."""
    nodes = [f"node{i}" for i in range(count)]
    address = {n: "127.0.0.1" if shared_netns else f"10.213.7.{10 + i}" for i, n in enumerate(nodes)}
    facts = {
        n: {
            "node": n, "index": i, "hostname": n, "hostname_addresses": [address[n]], "hostname_error": "",
            "advertised": address[n], "advertised_from": "hostname", "port": 40000 + i,
            "interfaces": ["eth0", "lo"], "ifnames": {}, "torch": "2.13.0", "shm_bytes": 8 << 30,
            "nofile": 1048576, "net_ns": "net:[1]" if shared_netns else f"net:[{100 + i}]",
            **({"rdzv_port_free": True} if i == 0 else {}),
        }
        for i, n in enumerate(nodes)
    }  # fmt: skip
    reach = {
        n: {
            "node": n,
            "peers": {p: {"connect": "ok", "lookup_s": 0.001} for p in nodes if p != n},
            "rdzv_addresses": [address["node0"]],
            "rdzv_error": "",
            "rdzv_connect": "ok",
        }
        for n in nodes
    }
    return nodes, facts, reach


def lines(nodes, facts, reach, backend="gloo") -> list[str]:
    return [f.line() for f in findings(nodes, facts, reach, backend)]


@pytest.mark.parametrize("count", [1, 2, 3, 8])
@pytest.mark.parametrize("shared_netns", [False, True], ids=["own-netns", "loopback-hosts"])
def test_a_healthy_lab_finds_nothing(count, shared_netns):
    assert lines(*healthy(count, shared_netns)) == []


def hostname_on_loopback(count: int, bad: int) -> tuple[str, list[str], dict, dict]:
    """node{bad}'s hostname resolving to 127.0.1.1 first: its peers' connections refused there."""
    nodes, facts, reach = healthy(count)
    name = f"node{bad}"
    facts[name].update(advertised="127.0.1.1", hostname_addresses=["127.0.1.1"])
    for other in nodes:
        if other != name:
            reach[other]["peers"][name]["connect"] = "Connection refused"
    return name, nodes, facts, reach


@pytest.mark.parametrize("count,bad", [(2, 1), (2, 0), (4, 2), (4, 3)])
def test_a_hostname_on_loopback_is_one_note_about_its_node(count, bad):
    name, nodes, facts, reach = hostname_on_loopback(count, bad)
    (finding,) = findings(nodes, facts, reach, "gloo")
    assert finding.note, "measured: the lesson's gloo job passes (lab bench doctor)"
    assert finding.line().startswith(f"note: {name}: its hostname {name} resolves to 127.0.1.1 (loopback) first")
    assert finding.line().endswith(f"make {name} resolve to the address the other nodes reach (/etc/hosts)")


@pytest.mark.parametrize("count,bad", [(2, 1), (3, 0)])
def test_in_containers_a_hostname_on_loopback_is_a_finding_not_a_note(count, bad):
    """Measured: in Docker containers gloo gives its peers the hostname's loopback address, and the
    lesson's job fails in 7 s (tests/fixtures/doctor_drills/docker/hostname-on-loopback.json)."""
    name, nodes, facts, reach = hostname_on_loopback(count, bad)
    (finding,) = findings(nodes, facts, reach, "gloo", in_containers=True)
    assert not finding.note
    assert finding.line().startswith(f"{name}: its hostname {name} resolves to 127.0.1.1 (loopback) first")
    assert "gloo gives its peers that address and connectFullMesh fails" in finding.line()
    assert "picks another" not in finding.line()


@pytest.mark.parametrize("source,peer", [("node0", "node1"), ("node2", "node0")])
def test_a_dropped_connection_names_who_cannot_reach_whom(source, peer):
    nodes, facts, reach = healthy(3)
    reach[source]["peers"][peer]["connect"] = "no answer in 2 s"
    found = lines(nodes, facts, reach)
    address = facts[peer]["advertised"]
    assert found == [
        f"{source}: cannot reach {peer} at {address}:{facts[peer]['port']} (no answer in 2 s): a firewall or a "
        "route between them: allow TCP between the nodes on every port above 1024"
    ]


def test_a_rendezvous_on_localhost_is_a_world_of_its_own_on_another_host_only():
    nodes, facts, reach = healthy(3)
    reach["node2"].update(rdzv_addresses=["127.0.0.1"], rdzv_connect="Connection refused")
    (found,) = lines(nodes, facts, reach)
    assert found.startswith("node2: the rendezvous host resolves to 127.0.0.1, itself: it would rendezvous alone")
    nodes, facts, reach = healthy(3, shared_netns=True)  # loopback hosts: localhost is node 0's too
    reach["node2"].update(rdzv_addresses=["127.0.0.1"], rdzv_connect="Connection refused")
    (found,) = lines(nodes, facts, reach)
    assert "alone" not in found and "cannot be reached there (Connection refused)" in found


def test_a_taken_rendezvous_port_or_an_unresolved_rendezvous_host():
    nodes, facts, reach = healthy(2)
    facts["node0"]["rdzv_port_free"] = False
    for record in reach.values():
        record["rdzv_connect"] = "not tried: the port is taken"
    reach["node1"].update(rdzv_addresses=[], rdzv_error="Name or service not known")
    assert lines(nodes, facts, reach) == [
        "node0: the rendezvous port is already in use there: pick another with --rdzv-port",
        "node1: the rendezvous host does not resolve (Name or service not known): give --rdzv-host a name every "
        "node resolves, or node 0's address",
    ]


def test_findings_come_by_node_whatever_met_them():
    nodes, facts, reach = healthy(12)
    for node in ("node10", "node2"):
        facts[node].update(advertised="127.0.0.1", advertised_from="GLOO_SOCKET_IFNAME=lo")
        for other in nodes:
            if other != node:
                reach[other]["peers"][node]["connect"] = "Connection refused"
    found = lines(nodes, facts, reach)
    assert [f.split(":")[0] for f in found] == ["node2", "node10"], found
    assert all(
        f.endswith("set GLOO_SOCKET_IFNAME to the interface that reaches the other nodes, not loopback") for f in found
    )


def test_each_node_of_its_own():
    nodes, facts, reach = healthy(3)
    facts["node1"].update(ifnames={"GLOO_SOCKET_IFNAME": "eth9"}, advertised=None, port=None)
    facts["node2"]["nofile"] = 256
    facts["node0"].update(hostname_error="Name or service not known", hostname_addresses=[], advertised=None)
    judged = findings(nodes, facts, reach, "gloo")
    found = [f.line() for f in judged]
    assert [(f.node, f.note) for f in judged] == [("node0", True), ("node1", False), ("node2", False)], found
    assert found[0].startswith("note: node0: its hostname node0 does not resolve"), "measured: the job passes"
    assert "GLOO_SOCKET_IFNAME=eth9 names no interface here (it has eth0, lo)" in found[1]
    assert "open-file limit is 256" in found[2]


def test_shared_memory_counts_for_nccl_only():
    nodes, facts, reach = healthy(2)
    facts["node1"]["shm_bytes"] = 64 << 20
    assert lines(nodes, facts, reach, "gloo") == []
    (found,) = lines(nodes, facts, reach, "nccl")
    assert found.startswith("node1: /dev/shm is 64 MiB") and "--shm-size" in found


def test_torch_versions_slow_lookups_and_silent_nodes():
    nodes, facts, reach = healthy(3)
    facts["node2"]["torch"] = "2.12.1"
    reach["node0"]["peers"]["node2"]["lookup_s"] = 5.0
    del facts["node1"], reach["node1"]
    found = lines(nodes, facts, reach)
    assert "node1: its probe did not report: see its log in the run dir" in found
    assert [f.split(":")[0] for f in found[:2]] == ["node0", "node1"], "by node"
    assert any(f.startswith("node0: looking up the name of node2's address") and "5.0 s" in f for f in found)
    assert found[-1] == (
        "torch differs between the nodes (2.13.0 on node0, 2.12.1 on node2): install the same torch on every node"
    )


def test_the_docs_table_names_every_misconfiguration_the_lab_plants():
    from conftest import REPO

    from lab.runtimes.misconfig import MISCONFIGS

    table = (REPO / "docs" / "doctor.md").read_text()
    assert [name for name in MISCONFIGS if f"| `{name}`" not in table] == []


@pytest.mark.parametrize(
    "address,loopback",
    [("127.0.1.1", True), ("::1", True), ("::1%lo", True), ("10.213.7.10", False), ("fe80::1%eth0", False),
     (None, False), ("node0", False)],
)  # fmt: skip
def test_what_counts_as_loopback(address, loopback):
    assert is_loopback(address) is loopback


def change(**nodes_facts) -> list[str]:
    """The lines for 2 healthy nodes with some facts changed: node=dict of facts."""
    nodes, facts, reach = healthy(2)
    backend = nodes_facts.pop("backend", "gloo")
    for node, changes in nodes_facts.items():
        facts[node].update(changes)
    return lines(nodes, facts, reach, backend)


def test_each_finding_of_a_node_on_its_own_in_its_words():
    assert change(node1={"ifnames": {"NCCL_SOCKET_IFNAME": "eth0,eth9"}}) == [
        "node1: NCCL_SOCKET_IFNAME=eth0,eth9 names no interface here (it has eth0, lo): name the interface that "
        "reaches the other nodes, or unset it"
    ]
    assert change(node1={"ifnames": {"GLOO_SOCKET_IFNAME": "eth0,lo"}}) == []
    assert change(node0={"advertised": None, "port": None, "hostname_addresses": ["10.9.9.9", "10.9.9.8"]}) == [
        "node0: none of the addresses its hostname node0 resolves to (10.9.9.9, 10.9.9.8) is one of its own: gloo "
        "cannot listen there: make the hostname resolve to this node's address (/etc/hosts), or set GLOO_SOCKET_IFNAME"
    ]
    assert change(node1={"hostname_error": "Name or service not known", "advertised": None}) == [
        "note: node1: its hostname node1 does not resolve (Name or service not known): a program that looks up its "
        "own name fails (torch's gloo picks an address without it): list the hostname in /etc/hosts with the address "
        "the other nodes reach"
    ]
    named = {"hostname_error": "Name or service not known", "ifnames": {"GLOO_SOCKET_IFNAME": "eth0"}}
    assert change(node1=named) == [], "gloo takes the interface named, not the hostname"
    assert change(node1={"shm_bytes": (512 << 20) - 1}, backend="nccl") == [
        "node1: /dev/shm is 511 MiB: nccl's shared-memory transport needs more: give it 1 GiB or more (docker run "
        "--shm-size=1g; in Kubernetes an emptyDir of medium Memory)"
    ]
    assert change(node1={"shm_bytes": 512 << 20}, backend="nccl") == change(node1={"shm_bytes": None}, backend="nccl")
    assert change(node1={"shm_bytes": None}, backend="nccl") == []
    assert change(node0={"nofile": 1023}) == [
        "node0: its open-file limit is 1023: every peer connection and worker pipe takes one: raise it to 1024 or "
        "more (ulimit -n, or the container's nofile limit)"
    ]
    assert change(node0={"nofile": 1024}) == []
    assert change(node1={"torch": None}) == [
        "torch differs between the nodes (2.13.0 on node0, none on node1): install the same torch on every node"
    ]


def test_each_finding_between_nodes_in_its_words():
    nodes, facts, reach = healthy(3)
    facts["node0"].update(advertised="127.0.0.1", advertised_from="GLOO_SOCKET_IFNAME=lo")
    for source in ("node1", "node2"):
        reach[source]["peers"]["node0"]["connect"] = "Connection refused"
    reach["node2"]["peers"]["node1"]["connect"] = "no answer in 2 s"  # met after node0, by the same source
    reach["node1"]["peers"]["node2"]["lookup_s"] = 1.0  # at the bound: not slow
    reach["node0"]["peers"]["node2"]["lookup_s"] = 1.5
    assert lines(nodes, facts, reach) == [
        "node0: looking up the name of node2's address 10.213.7.12 took 1.5 s, paid on every connection: list the "
        "nodes in /etc/hosts, or fix the DNS server in /etc/resolv.conf",
        "node0: it gives its peers 127.0.0.1 (GLOO_SOCKET_IFNAME=lo: loopback), where node1 cannot reach it "
        "(Connection refused): gloo's connectFullMesh fails: set GLOO_SOCKET_IFNAME to the interface that reaches "
        "the other nodes, not loopback",
        "node2: cannot reach node1 at 10.213.7.11:40001 (no answer in 2 s): a firewall or a route between them: "
        "allow TCP between the nodes on every port above 1024",
    ]


def test_the_rendezvous_in_its_words_and_a_silent_store_host():
    nodes, facts, reach = healthy(2)
    reach["node1"].update(rdzv_addresses=["10.213.7.99"], rdzv_connect="no answer in 2 s")
    assert lines(nodes, facts, reach) == [
        "node1: the rendezvous host resolves to 10.213.7.99, and the store cannot be reached there (no answer in 2 s): "
        "give the rendezvous node 0's address, one every node reaches"
    ]
    del facts["node0"], reach["node0"]  # node 0's probe never reported: nothing to say of the store's port
    reach["node1"].update(rdzv_addresses=["10.213.7.10"], rdzv_connect="not tried: node 0's probe did not report")
    assert lines(nodes, facts, reach) == ["node0: its probe did not report: see its log in the run dir"]
