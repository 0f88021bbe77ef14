"""A real Prometheus scraping a real 2-node x 2-process job on netns hosts."""

import pytest
from conftest import needs_netns, wait_for

from lab.bench import free_port
from lab.health.prometheus import Prometheus, binary

pytestmark = [
    pytest.mark.slow,
    needs_netns,
    pytest.mark.skipif(binary() is None, reason="prometheus not installed (make host-deps)"),
]


def steps_by_rank(prom: Prometheus) -> dict[str, float]:
    return {s["metric"]["rank"]: s["value"] for s in prom.query("lab_steps_total")}


def test_prometheus_sees_every_rank_step_and_then_go_down(lab):
    port = free_port()
    prom = Prometheus(lab.run_dir / "prometheus", port=port)
    up = lab(
        "up",
        "--detach",
        "--prometheus",
        "on",
        "--prometheus-port",
        str(port),
        "--workload",
        "trainer",
        "--",
        "--steps",
        "150",
        "--step-time",
        "0.1",
    )
    assert up.returncode == 0, up.stdout + up.stderr

    first = wait_for(lambda: (s := steps_by_rank(prom)) and len(s) == 4 and s, 90, "four ranks scraped")
    later = wait_for(
        lambda: (s := steps_by_rank(prom)) and all(s[r] > first[r] for r in first) and s,
        30,
        "every rank's step counter to rise",
    )
    assert set(later) == {"0", "1", "2", "3"}
    nodes = {s["metric"]["rank"]: s["metric"]["node"] for s in prom.query("lab_rank_info")}
    assert sorted(nodes.values()) == ["node0", "node0", "node1", "node1"]
    agents = prom.query('lab_agent_worker_group_state{state="HEALTHY"} == 1')
    assert {a["metric"]["node"] for a in agents} == {"node0", "node1"}

    wait_for(lambda: lab("status").stdout.count("exited 0") == 2, 120, "the job to finish")
    down = wait_for(
        lambda: (u := prom.query('up{job="lab-ranks"}')) and all(x["value"] == 0 for x in u) and u,
        30,
        "the rank targets to go down",
    )
    assert len(down) == 4
