"""No other user of this machine reaches a lab's control ports (lab.runtimes.fence).

The root agents unpickle what node 0's c10d store and the lab's etcd hand them, so a
local user who could write there would run code as root. These start real netns labs
and connect as uid 65534 (nobody, through setpriv), as root, and from a network
namespace that is not the lab's, routed through the host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
from conftest import needs_netns, wait_for

from lab.runtimes import fence, netns
from lab.runtimes.ports import free_etcd_port

# The foreign namespace's host address is fixed: its tests run in one worker, one at a time.
pytestmark = [pytest.mark.slow, needs_netns, pytest.mark.xdist_group("fence")]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def reach(host: str, port: int, prefix: tuple[str, ...] = ()) -> str:
    """'open', or 'closed' and why: a TCP connect by bash itself (no interpreter nobody may lack)."""
    probe = f"exec 3<>/dev/tcp/{host}/{port} && echo open"
    done = subprocess.run([*prefix, "timeout", "5", "bash", "-c", probe], capture_output=True, text=True, timeout=30)
    return done.stdout.strip() if done.returncode == 0 else f"closed {done.stderr.strip() or done.returncode}"


def wait_open(host: str, port: int, timeout_s: float = 60) -> None:
    """Root reaches it (the lab's own tools do) once the agent listens."""
    deadline = time.monotonic() + timeout_s
    while reach(host, port) != "open":
        assert time.monotonic() < deadline, f"{host}:{port} never opened"
        time.sleep(0.5)


def start_detached(lab, *flags: str) -> dict:
    out = lab("up", "--detach", "--prometheus", "off", *flags, "--workload", "trainer", "--",
              "--steps", "3000", "--step-time", "0.1")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads((lab.run_dir / "state.json").read_text())


@pytest.fixture
def foreign_netns():
    """A namespace of someone else's, with a route to every 10.213.x.x lab through the host."""
    name, outside = f"fencetest-{os.getpid()}", f"fto{os.getpid() % 100000}"
    ip = ["ip"]
    subprocess.run([*ip, "netns", "add", name], check=True)
    try:
        subprocess.run([*ip, "link", "add", outside, "type", "veth", "peer", "name", "fti0", "netns", name], check=True)
        subprocess.run([*ip, "addr", "add", "10.214.254.1/30", "dev", outside], check=True)
        subprocess.run([*ip, "link", "set", outside, "up"], check=True)
        inside = [*ip, "-n", name]
        subprocess.run([*inside, "addr", "add", "10.214.254.2/30", "dev", "fti0"], check=True)
        subprocess.run([*inside, "link", "set", "fti0", "up"], check=True)
        subprocess.run([*inside, "route", "add", "default", "via", "10.214.254.1"], check=True)
        yield ("ip", "netns", "exec", name)
    finally:
        subprocess.run([*ip, "link", "del", outside], capture_output=True)
        subprocess.run([*ip, "netns", "del", name], capture_output=True)


def test_the_c10d_store_is_fenced_from_other_users_and_other_networks(lab, foreign_netns):
    state = start_detached(lab)
    node0 = state["nodes"][0]["address"]
    port = state["topology"]["rdzv_port"]
    wait_open(node0, port)
    assert reach(node0, port, tuple(NOBODY)).startswith("closed")
    assert reach(node0, port, foreign_netns).startswith("closed")
    rules = fence.find(state["lab_id"])
    assert any("OUTPUT" in r for r in rules) and any("FORWARD" in r for r in rules)
    assert lab("down").returncode == 0
    assert fence.find(state["lab_id"]) == []


def listeners(netns: str) -> list[tuple[str, int]]:
    """Every listening TCP socket in one of the lab's namespaces, as `ss` sees it: (address, port)."""
    out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-Hltn"], capture_output=True, text=True, check=True)
    found = []
    for line in out.stdout.splitlines():
        address, _, port = line.split()[3].rpartition(":")
        found.append((address.strip("[]"), int(port)))
    return found


def exporters_listening(state: dict) -> dict[str, list[tuple[str, int]]] | None:
    """Every node's listeners once an agent's and a rank's exporter both listen (they start after
    the store, later still on a busy machine), else None."""
    topology = state["topology"]
    found = {}
    for node in state["nodes"]:
        ns = netns.for_lab(state["lab_id"], node["address"].rsplit(".", 1)[0]).host(node["index"]).netns
        found[ns] = listeners(ns)
    ports = {port for heard in found.values() for address, port in heard if address != "127.0.0.1"}
    agent = any(port in ports for port in range(topology["agent_metrics_port"], topology["agent_metrics_port"] + 8))
    rank = any(port in ports for port in range(topology["rank_metrics_port"], topology["rank_metrics_port"] + 8))
    return found if agent and rank else None


def test_every_listener_of_every_node_is_fenced_on_every_address_family(lab):
    """Listeners are found, not listed: whatever a node starts (store, keepers, exporters, gloo)
    is probed as nobody. IPv6 gets no address anywhere in the lab (the attack reached node 0's
    store at its fe80:: address through the bridge while IPv4 was refused)."""
    state = start_detached(lab)
    node0, port = state["nodes"][0]["address"], state["topology"]["rdzv_port"]
    wait_open(node0, port)
    found = wait_for(lambda: exporters_listening(state), 120, "an agent's and a rank's exporter")
    host_v6 = subprocess.run(["ip", "-o", "-6", "addr", "show"], capture_output=True, text=True).stdout
    assert f"tlab{state['lab_id']}" not in host_v6  # neither the bridge nor a veth's outer end
    probed = set()
    for node, (ns, heard) in zip(state["nodes"], found.items(), strict=True):
        inside_v6 = subprocess.run(["ip", "-n", ns, "-o", "-6", "addr", "show"], capture_output=True, text=True)
        assert inside_v6.returncode == 0 and inside_v6.stdout == "", inside_v6.stdout
        for address, listening in heard:
            assert address in ("*", "0.0.0.0", node["address"], "127.0.0.1"), (ns, address)  # no v6-only socket
            if address != "127.0.0.1":
                assert reach(node["address"], listening, tuple(NOBODY)).startswith("closed"), (ns, listening)
                probed.add(listening)
    assert port in probed  # the store, beside the exporters waited for above
    assert lab("down").returncode == 0


@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd-server is not installed (make host-deps)")
def test_the_labs_etcd_is_fenced_from_other_users(lab):
    # Off torchrun's default port, which the system tier's loopback labs (another xdist group) bind.
    state = start_detached(lab, "--rdzv-backend", "etcd-v2", "--rdzv-port", str(free_etcd_port(24400)))
    gateway = state["nodes"][0]["address"].rsplit(".", 1)[0] + ".1"
    port = state["topology"]["rdzv_port"]
    wait_open(gateway, port)
    for client_or_peer in (port, port + 1):
        assert reach(gateway, client_or_peer, tuple(NOBODY)).startswith("closed")
        assert reach("127.0.0.1", client_or_peer, tuple(NOBODY)).startswith("closed")
