"""`lab doctor` on Docker containers with a misconfiguration planted in one (the docker runtime,
the real daemon and the cpu image): each that can be planted in containers is named in one line
on the node it is about, and nothing of the run is left (the firewall's rule on the host
included). What the lesson's job does with each in containers is recorded in
tests/fixtures/doctor_drills/docker/ and judged by the unit tier."""

from __future__ import annotations

import pytest
from docker_support import labelled

from lab.doctor.planted import PLANTED_ON, doctor_row
from lab.rundir import RunDir
from lab.runtimes import fence
from lab.runtimes.misconfig import MISCONFIGS

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.mark.parametrize("name", sorted(n for n, m in MISCONFIGS.items() if m.in_containers is not None))
def test_each_misconfiguration_planted_in_a_container_is_named_on_its_node(tmp_path, images, name):
    misconfig = MISCONFIGS[name]
    run = tmp_path / "run"
    row = doctor_row(misconfig, RunDir(run), "docker")
    blamed = misconfig.blamed(PLANTED_ON, 2)
    assert row["named"], f"no finding about {blamed} says {misconfig.says!r}: {row}"
    assert row["finding"].split(": ", 1)[0] == blamed, row["finding"]  # a finding, not a note
    assert labelled(run) == [] and labelled(run, "network") == []
    # The firewall's rule on the Docker host goes with the run (no other test plants one there).
    assert [rule for rule in fence.find(None) if rule.startswith("-A DOCKER-USER")] == []
