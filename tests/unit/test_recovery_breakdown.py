"""The recovery breakdown of a restart (lab.exercises.observe): stage by stage from the fault to
the first step of a new group, on records written down by hand."""

from __future__ import annotations

import pytest

from lab.exercises.observe import recovery_breakdown
from lab.health.events import AgentEvent, Event


def agent(t: float, name: str = "", message: str = "") -> dict:
    return {"time": t, "name": name, "message": message}


def event(t: float, name: str) -> dict:
    return {"time": t, "event": name}


def test_each_stage_runs_from_the_fault_to_the_new_groups_first_step():
    """Fault at 10.0; the agent sees it at 10.4, asks to join at 10.9, has joined at 11.0; the new
    workers have their group at 12.0, load the checkpoint at 12.5 and step at 13.0. The step a
    survivor finished at 10.1, in flight when the fault struck, is no recovery."""
    agents = [
        agent(10.4, AgentEvent.FAILURE_DETECTED),
        agent(10.9, message="[default] attempts to join the next round"),
        agent(11.0, message="[default] has joined round 1"),
    ]
    events = [
        event(10.1, Event.STEP),
        event(12.0, Event.RENDEZVOUS_DONE),
        event(12.5, Event.CHECKPOINT_LOADED),
        event(13.0, Event.STEP),
    ]
    found = recovery_breakdown(events, agents, 10.0)
    expected = {"detect": 0.4, "teardown": 0.5, "rendezvous": 0.1, "worker_init": 1.0, "checkpoint_load": 0.5}
    assert found == pytest.approx({**expected, "first_step": 0.5, "total": 3.0})


def test_a_hang_nothing_recovered_has_no_recovery_time():
    """The survivors' steps until they block, and nothing after: no new group, so no total (it
    once read "first step 0.0 s after the fault")."""
    events = [event(10.02, Event.STEP), event(10.05, Event.STEP)]
    found = recovery_breakdown(events, [], 10.0)
    assert found["total"] is None and found["first_step"] is None
