"""A keeper's agent metrics (lab.node.inprocess.node_health), read over HTTP as Prometheus reads them:
a replacement shows as a restart used from the budget, the group's state and each exit by its
code; and nothing is served where the lab asked for no agent exporter."""

import urllib.request

from lab.bench import free_port
from lab.node.inprocess.node_health import NodeHealth


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def test_a_keepers_replacements_exits_and_state_are_its_nodes_agent_metrics(monkeypatch, capfd):
    port = free_port()
    monkeypatch.setenv("LAB_AGENT_METRICS_PORT", str(port))
    monkeypatch.setenv("LAB_EXPORTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("TORCHRUN_LAB_NODE", "node1")
    health = NodeHealth(max_replacements=2)
    assert f"agent metrics on :{port}/metrics" in capfd.readouterr().err  # the line the runtimes wait for
    health.state("HEALTHY")
    health.exited(4242, -9)
    health.exited(4242, -9)  # the same process seen again: counted once
    health.restarts(1)
    text = scrape(port)
    assert 'lab_agent_restarts_used{node="node1"} 1.0' in text
    assert 'lab_agent_restarts_remaining{node="node1"} 1.0' in text
    assert 'lab_agent_worker_group_state{node="node1",state="HEALTHY"} 1.0' in text
    assert 'lab_agent_worker_exits_total{exit_code="-9",node="node1"} 1.0' in text


def test_without_an_agent_port_a_keeper_serves_nothing(monkeypatch):
    monkeypatch.delenv("LAB_AGENT_METRICS_PORT", raising=False)
    monkeypatch.delenv("LAB_NET_PROBE", raising=False)
    health = NodeHealth(max_replacements=2)
    assert health.metrics is None
    health.restarts(1)  # a no-op, not an error
