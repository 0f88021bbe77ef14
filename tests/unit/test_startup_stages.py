"""The start-up breakdown (lab.bench.startup_stages) on a recorded run's first start: the
kill-worker drill's fixture (c10d, 2 x 2), its events and agents' records as they were."""

import json

import pytest
from drill_cases import FIXTURES

from lab.bench.startup_stages import STAGES, stages, table


@pytest.fixture
def recorded():
    seen = json.loads((FIXTURES / "kill-worker" / "seen.json").read_text())
    return seen["events"], seen["agents"]


def test_the_stages_follow_the_first_start_in_order_and_add_up(recorded):
    events, agents = recorded
    launched = agents[0]["time"] - 2.0  # the launch itself is not recorded: two seconds before the first record
    found = stages(launched, events, agents)
    assert all(found[name] is not None and found[name] >= 0 for name in STAGES), found
    parts = sum(found[name] for name in STAGES if name != "total")
    assert found["total"] == pytest.approx(parts)
    first_join = min(r["time"] for r in agents if "attempts to join" in r["message"])
    assert found["agent"] == pytest.approx(first_join - launched)
    first_step = min(e["time"] for e in events if e["event"] == "step")
    assert found["total"] == pytest.approx(first_step - launched)  # the first start's first step, not a restart's


def test_a_start_with_no_worker_records_says_so_rather_than_guessing(recorded):
    _, agents = recorded
    found = stages(agents[0]["time"] - 2.0, [], agents)
    assert found["agent"] is not None and found["worker"] is None and found["total"] is None
    assert "| worker | - | not recorded |" in table([found])
