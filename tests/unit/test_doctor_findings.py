"""lab doctor's judgement on what the probes report (lab.doctor.findings), from reports as
lab.node.doctor_probe writes them: a healthy lab of any size finds nothing; each misconfiguration
is one line about the node at fault, whichever node, and whichever peers met it."""

from __future__ import annotations

import pytest

from lab.doctor.findings import findings


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


@pytest.mark.parametrize("count,bad", [(2, 1), (2, 0), (4, 2), (4, 3)])
def test_a_hostname_on_loopback_is_one_note_about_its_node(count, bad):
    nodes, facts, reach = healthy(count)
    name = f"node{bad}"
    facts[name].update(advertised="127.0.1.1", hostname_addresses=["127.0.1.1"])
    for other in nodes:
        if other != name:
            reach[other]["peers"][name]["connect"] = "Connection refused"
    (finding,) = findings(nodes, facts, reach, "gloo")
    assert finding.note, "measured: the lesson's gloo job passes (lab bench doctor)"
    assert finding.line().startswith(f"note: {name}: its hostname {name} resolves to 127.0.1.1 (loopback) first")
    assert finding.line().endswith(f"make {name} resolve to the address the other nodes reach (/etc/hosts)")


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
