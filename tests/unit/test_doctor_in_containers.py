"""Misconfigurations planted in Docker containers (lab.runtimes.misconfig's in_containers): what each
plant asks of the containers it makes, which ones say in one line why they cannot be planted there,
and the drill's verdict on runs recorded in containers (tests/fixtures/doctor_drills/docker/, from
`lab exercise run NAME --runtime docker --bound 30`). tests/test_doctor_containers.py plants them
in real containers."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import lab_in_process
from test_cli_errors import assert_one_line_error

from lab.doctor import drills
from lab.errors import LabError
from lab.runtimes.misconfig import GLOO_CONNECTS_DOWN, MISCONFIGS, NOT_IN_CONTAINERS

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "doctor_drills" / "docker"
IN_CONTAINERS = sorted(name for name, m in MISCONFIGS.items() if m.in_containers is not None)


def plan_of(nodes: int = 3) -> SimpleNamespace:
    """The docker runtime's plan as a plant sees it: nodes with a name, extra hosts lines and an environment."""
    return SimpleNamespace(
        nodes=[SimpleNamespace(name=f"node{i}", extra_hosts={}, environment={}) for i in range(nodes)]
    )


def test_the_hosts_lines_go_to_the_planted_node_alone():
    plan = plan_of()
    MISCONFIGS["hostname-on-loopback"].planter("docker")(plan, 2, ExitStack())
    assert [n.extra_hosts for n in plan.nodes] == [{}, {}, {"node2": "127.0.1.1"}]
    plan = plan_of()
    MISCONFIGS["rendezvous-on-localhost"].planter("docker")(plan, 1, ExitStack())
    assert [n.extra_hosts for n in plan.nodes] == [{}, {"node0": "127.0.0.1"}, {}]
    assert all(n.environment == {} for n in plan.nodes)


@pytest.mark.parametrize(("name", "value"), [("interface-missing", "eth9"), ("interface-loopback", "lo")])
def test_an_interface_named_for_gloo_is_set_in_every_container(name, value):
    plan = plan_of()
    MISCONFIGS[name].planter("docker")(plan, 1, ExitStack())
    assert [n.environment for n in plan.nodes] == [{"GLOO_SOCKET_IFNAME": value}] * 3
    assert all(n.extra_hosts == {} for n in plan.nodes)


def test_the_local_runtime_keeps_its_own_plants():
    assert all(m.planter("local") is m.plant for m in MISCONFIGS.values())


@pytest.mark.parametrize("name", sorted(NOT_IN_CONTAINERS))
def test_one_that_cannot_be_planted_in_containers_says_why_in_one_line(name):
    with pytest.raises(LabError) as raised:
        MISCONFIGS[name].planter("docker")
    line = str(raised.value)
    assert "\n" not in line and f"{name} cannot be planted on --runtime docker" in line
    assert NOT_IN_CONTAINERS[name] in line and line.endswith("use --runtime local")


def test_every_misconfiguration_is_planted_in_containers_or_says_why_not():
    assert set(IN_CONTAINERS) | set(NOT_IN_CONTAINERS) == set(MISCONFIGS)
    assert not set(IN_CONTAINERS) & set(NOT_IN_CONTAINERS)


@pytest.mark.parametrize("name", IN_CONTAINERS)
def test_each_run_recorded_in_containers_passes(name):
    row = json.loads((RECORDED / f"{name}.json").read_text())
    report = drills.judge(MISCONFIGS[name], row["job"], row["doctor"], 30.0, "docker")
    assert report.verdict == "pass" and report.runtime == "docker", report.checks


def test_a_hostname_on_loopback_breaks_the_job_in_containers_where_netns_hosts_cope():
    """Measured: on netns hosts the lesson's job passes with it; in containers gloo connects to
    127.0.1.1 and fails in 7 s. The same run judged by the netns measurement fails its check."""
    row = json.loads((RECORDED / "hostname-on-loopback.json").read_text())
    m = MISCONFIGS["hostname-on-loopback"]
    assert m.passes_on("local") and not m.passes_on("docker")
    wrong = drills.judge(m, row["job"], row["doctor"], 30.0, "local")
    assert [c.name for c in wrong.checks if not c.ok] == ["the job passes all the same (torch 2.13's gloo copes)"]


def test_a_firewall_lets_the_job_train_in_containers_where_netns_hosts_fail_it():
    """Measured: on a netns host the node's INPUT chain drops its own ranks' connections to each
    other too, and the job fails; in containers only the other nodes' connections into node 1 meet
    the host's rule, and gloo makes none. The same run judged by the netns measurement fails."""
    row = json.loads((RECORDED / "firewall.json").read_text())
    m = MISCONFIGS["firewall"]
    assert m.passes_on("docker") and not m.passes_on("local")
    wrong = drills.judge(m, row["job"], row["doctor"], 30.0, "local")
    assert [c.name for c in wrong.checks if not c.ok] == ["the job does not train: it fails or hangs"]


def test_the_drill_refuses_in_containers_before_anything_starts(tmp_path, capsys):
    out = lab_in_process(
        capsys, "exercise", "run", "silent-dns", "--runtime", "docker", "--run-dir", str(tmp_path / "run")
    )
    assert_one_line_error(out, "silent-dns cannot be planted on --runtime docker", "use --runtime local")
    assert not (tmp_path / "run" / "nodes").exists()


@pytest.mark.parametrize(
    ("docker_host", "because"),
    [("tcp://10.0.0.5:2376", "the Docker daemon runs on another machine"), ("unix://", "")],
)
def test_the_firewall_is_refused_in_one_line_where_the_docker_hosts_firewall_is_not_the_labs(
    tmp_path, capsys, monkeypatch, docker_host, because
):
    """A rule on DOCKER-USER needs the daemon on this machine, root and iptables; where any lacks
    (here: a remote daemon, or this test run without root), one line before anything starts."""
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    if not because:
        because = MISCONFIGS["firewall"].containers_lack()  # without root, iptables, or Docker's chain
        if not because:
            pytest.skip("as root beside a local daemon the firewall is planted (tests/test_doctor_containers.py)")
    out = lab_in_process(
        capsys, "exercise", "run", "firewall", "--runtime", "docker", "--run-dir", str(tmp_path / "run")
    )
    assert_one_line_error(out, "firewall cannot be planted on --runtime docker here: ", because, "use --runtime local")
    assert not (tmp_path / "run" / "nodes").exists()


def test_the_bench_in_containers_refuses_one_named_that_cannot_be_planted_there(tmp_path, capsys):
    out = lab_in_process(
        capsys, "bench", "doctor", "--runtime", "docker", "--misconfigs", "silent-dns", "--out", str(tmp_path / "b")
    )
    assert_one_line_error(out, "silent-dns cannot be planted on --runtime docker", "use --runtime local")
    assert not (tmp_path / "b").exists()


def test_the_bench_publishes_a_section_per_runtime_and_says_what_it_did_not_plant():
    from lab.bench import doctor

    assert doctor.sections() == ["doctor", "doctor-docker"]
    refused = doctor._refused(sorted(MISCONFIGS), "docker", named=False)
    assert sorted(refused) == sorted(NOT_IN_CONTAINERS)
    row = json.loads((RECORDED / "interface-missing.json").read_text())
    rows = {"interface-missing": {**row["doctor"], **row["job"]}}
    body = doctor.markdown(rows, 30.0, "docker")
    assert body[0].startswith("Each planted on node 1 of 2 Docker containers.")
    assert any(line.startswith("| interface-missing | failed | 7.6 s |") for line in body), body


def test_the_explanation_says_whether_it_is_planted_in_containers_and_what_the_job_does_there():
    explained = {name: drill.explanation() for name, drill in drills.drills().items()}
    assert (
        "In Docker containers too (--runtime docker), where the job fails or hangs."
        in explained["hostname-on-loopback"]
    )
    assert "passes all the same" in explained["hostname-on-loopback"]  # on netns hosts, measured
    assert (
        f"Not in containers: silent-dns cannot be planted on --runtime docker: {NOT_IN_CONTAINERS['silent-dns']}"
        in (explained["silent-dns"])
    )
    if not MISCONFIGS["firewall"].containers_lack():  # planted from the Docker host, as root
        assert f"where the job passes all the same ({GLOO_CONNECTS_DOWN})" in explained["firewall"]
