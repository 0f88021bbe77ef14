"""The start-up breakdown (lab.bench.startup_stages) on a recorded run's first start: the
kill-worker drill's fixture (c10d, 2 x 2), its events and agents' records as they were."""

import json

import pytest
from drill_cases import FIXTURES

from lab.bench.startup_stages import STAGES, stages, table
from lab.health.events import Event


@pytest.fixture
def recorded():
    seen = json.loads((FIXTURES / "kill-worker" / "seen.json").read_text())
    return seen["events"], seen["agents"]


def agent(t: float, message: str) -> dict:
    return {"time": t, "message": message}


def event(t: float, name: str) -> dict:
    return {"time": t, "event": name}


def test_each_stage_is_the_time_between_the_first_start_s_own_marks():
    """A start written down by hand: launched at 100.0; an agent asks to join at 101.5 and has
    joined at 102.0; the first worker starts at 102.7, has its group at 103.0 and steps at 104.0.
    Around it, what must not count: a step left from an earlier job (99.0), a second node's
    later marks, and a restart after the first step (its join at 110, its start at 111)."""
    agents = [
        agent(101.5, "[default] attempts to join the next round"),
        agent(101.9, "[default] attempts to join the next round"),  # the other node, later
        agent(102.0, "[default] has joined round 0"),
        agent(110.0, "[default] attempts to join the next round"),  # the restart's
        agent(110.4, "[default] has joined round 1"),
    ]
    events = [
        event(99.0, Event.STEP),  # before this launch
        event(102.7, Event.START),
        event(102.9, Event.START),
        event(103.0, Event.RENDEZVOUS_DONE),
        event(104.0, Event.STEP),
        event(111.0, Event.START),  # the restart's
        event(112.0, Event.STEP),
    ]
    found = stages(100.0, events, agents)
    expected = {"agent": 1.5, "rendezvous": 0.5, "worker": 0.7, "group": 0.3, "first_step": 1.0, "total": 4.0}
    assert found == pytest.approx(expected)


def test_the_recorded_run_has_every_stage_and_they_add_up(recorded):
    events, agents = recorded
    found = stages(agents[0]["time"] - 2.0, events, agents)
    assert all(found[name] is not None and found[name] >= 0 for name in STAGES), found
    assert found["total"] == pytest.approx(sum(found[name] for name in STAGES if name != "total"))


def test_a_start_with_no_worker_records_says_so_rather_than_guessing(recorded):
    _, agents = recorded
    found = stages(agents[0]["time"] - 2.0, [], agents)
    assert found["agent"] is not None and found["worker"] is None and found["total"] is None
    assert "| worker | - | not recorded |" in table([found])
