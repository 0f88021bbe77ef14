"""A slow network named on its node (lab.health.stragglers.first_slow_network) from round trips
recorded as lab.health.net_probe records them, and the probe itself against a real socket.
`lab bench stragglers --hosts netns` slows a real netns host with tc netem."""

import json

import pytest

from lab.bench import free_port
from lab.health import net_probe, stragglers
from lab.health.events import PROBE_PREFIX, EventLog, read_probes
from lab.why import card as why


def probes(tmp_path, rtt_of, seconds=20.0, nodes=("node0", "node1")):
    """Each node's probes every half second, rtt_of(node, t) each (None: no answer); read back."""
    events = tmp_path / "events"
    events.mkdir(parents=True, exist_ok=True)
    for node in nodes:
        with open(events / f"{PROBE_PREFIX}{node}.jsonl", "a") as f:
            for i in range(int(seconds / net_probe.INTERVAL_S)):
                t = 1000.0 + i * net_probe.INTERVAL_S
                f.write(json.dumps({"time": t, "event": "net_rtt", "node": node, "rtt": rtt_of(node, t)}) + "\n")
    return read_probes(events)


def steps(tmp_path, nodes=("node0", "node1")):
    """Two ranks a node, a step every 0.1 s of the same seconds (their times made to match)."""
    events = []
    for n, node in enumerate(nodes):
        for local in (0, 1):
            for step in range(1, 200):
                rank = 2 * n + local
                events.append({"time": 1000.0 + step * 0.1, "event": "step", "rank": rank, "node": node, "step": step})
    return events


@pytest.mark.parametrize("slow", ["node0", "node1"])
def test_the_node_whose_round_trips_grow_is_named_with_its_ranks(tmp_path, slow):
    recorded = probes(tmp_path, lambda node, t: 0.05 if node == slow and t >= 1008 else 0.0001)
    named = stragglers.first_slow_network(recorded, steps(tmp_path))
    assert named is not None and named.node == slow
    assert named.ranks == ([0, 1] if slow == "node0" else [2, 3])
    assert 80 <= named.step <= 80 + 20  # slowed at 8 s, the 80th step: named within a second or two
    assert "slow network: " + slow in named.text() and "50.0 ms" in named.text()


def test_even_round_trips_and_one_late_answer_name_nobody(tmp_path):
    calm = probes(tmp_path / "calm", lambda node, t: 0.0001 + (0.0002 if node == "node1" else 0))
    assert stragglers.first_slow_network(calm, []) is None
    once = probes(tmp_path / "once", lambda node, t: 0.3 if (node, t) == ("node1", 1005.0) else 0.0001)
    assert stragglers.first_slow_network(once, []) is None


def test_a_node_that_stops_answering_is_named_cut_and_to_the_stragglers_bench_slow(tmp_path):
    cut = probes(tmp_path, lambda node, t: None if node == "node1" and t >= 1004 else 0.0001)
    named = stragglers.first_slow_network(cut, [], timeout_s=2.0)
    assert named is not None and named.node == "node1" and named.cut  # two unanswered in a row
    slow = stragglers.first_slow_network(cut, [], timeout_s=2.0, cut_first=False)
    assert slow is not None and slow.node == "node1" and slow.rtt_s == 2.0  # once the window's median is one


def test_lab_why_says_which_node_has_the_slow_network(tmp_path):
    probes(tmp_path, lambda node, t: 0.08 if node == "node1" and t >= 1004 else 0.0002)
    log = EventLog(tmp_path / "events", rank=2, local_rank=0)
    log.step(1, 1.0, 0.05)
    card = why.card(tmp_path)
    assert "slow network: node1" in card.text() and card.to_json()["slow_network"]["node"] == "node1"


def test_the_probe_times_a_refused_connection():
    port = free_port()  # nothing listens there
    rtt = net_probe.round_trip("127.0.0.1", port)
    assert rtt is not None and 0 <= rtt < 1


def test_the_reader_leaves_out_lines_that_are_not_probes(tmp_path):
    (tmp_path / "net-node0.jsonl").write_text('{"time": 1.0, "node": "node0", "rtt": 0.001}\n{"tor\nnot json\n[]\n')
    assert [p["rtt"] for p in read_probes(tmp_path)] == [0.001]


def test_only_a_probing_agent_exports_a_round_trip():
    from lab.health.agent_exporter import AgentMetrics

    def exported(metrics):
        return {m.name for m in metrics.registry.collect()}

    quiet = AgentMetrics(node="node0", max_restarts=0)
    assert "lab_node_net_rtt_seconds" not in exported(quiet)  # loopback: no figure, not a 0
    probing = AgentMetrics(node="node1", max_restarts=0)
    probing.net_rtt().set(0.035)
    assert "lab_node_net_rtt_seconds" in exported(probing)


def test_a_node_cut_off_is_named_as_cut_though_it_looked_slow_first(tmp_path):
    """A partition's first windows still hold the node's last answers (slow ones, under load): the
    card names the cut that follows; the stragglers bench, timing the first sign, the slow window."""

    def rtt(node, t):
        if node == "node0" or t < 1008:
            return 0.0001
        return 0.03 if t < 1010 else None  # slow for two seconds, then nothing answers

    recorded, ranks = probes(tmp_path, rtt), steps(tmp_path)
    cut = stragglers.first_slow_network(recorded, ranks, net_probe.TIMEOUT_S)
    assert cut is not None and cut.cut and cut.node == "node1" and cut.ranks == [2, 3]
    assert "network cut: node1 (ranks 2, 3)" in cut.text()
    slow = stragglers.first_slow_network(recorded, ranks, net_probe.TIMEOUT_S, cut_first=False)
    assert slow is not None and not slow.cut and slow.step < cut.step


def test_a_node_that_drops_some_probes_is_slow_not_cut(tmp_path):
    recorded = probes(tmp_path, lambda node, t: None if node == "node1" and t >= 1008 and int(t * 2) % 2 else 0.0001)
    found = stragglers.first_slow_network(recorded, steps(tmp_path), net_probe.TIMEOUT_S)
    assert found is not None and found.node == "node1" and not found.cut
