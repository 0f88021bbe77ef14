"""When `lab up` and `lab run` call the doctor after a failed job (lab.doctor.after_failure): only
when a failure says the nodes could not meet, whichever rank says it; and the card's note read
back from the run dir (lab.why.doctor_note), never from a file the lab did not write."""

from __future__ import annotations

import os

import pytest

from lab.doctor.after_failure import cannot_connect
from lab.why import doctor_note
from lab.why.failure_card import Card, RankFailure

CANNOT_MEET = [
    "RuntimeError: Gloo connectFullMesh failed with [pair.cc:152] timed out connecting: SO_ERROR: Connection refused",
    "torch.distributed.DistNetworkError: The client socket has timed out after 60000ms while trying to connect to "
    "(node0, 29400).",
    "RendezvousTimeoutError: ",
    "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed.",
    "RuntimeError: [enforce fail at device.cc:81] ifa != nullptr. Unable to find interface for: [eth9] No such device",
    "socket.gaierror: [Errno -2] Name or service not known",
]
NOT_THE_NETWORK = [
    "ValueError: bad batch",
    "RuntimeError: CUDA out of memory",
    "RuntimeError: Error(s) in loading state_dict for Linear",
    "",
]


def failure(rank: int, error: str) -> RankFailure:
    return RankFailure(rank, f"node{rank // 2}", rank % 2, 1.0 + rank, 1, error=error)


@pytest.mark.parametrize("error", CANNOT_MEET)
@pytest.mark.parametrize("where", ["first", "then"])
def test_a_failure_that_says_the_nodes_could_not_meet_calls_the_doctor(error, where):
    first, later = (failure(2, error), failure(0, "")) if where == "first" else (failure(2, ""), failure(0, error))
    assert cannot_connect(Card(first=first, then=[later]))


@pytest.mark.parametrize("error", NOT_THE_NETWORK)
def test_other_failures_do_not(error):
    assert not cannot_connect(Card(first=failure(1, error), then=[failure(3, "")]))
    assert not cannot_connect(Card(first=None))


def test_the_note_is_read_back_from_the_run_dir_and_only_from_a_file(tmp_path):
    assert doctor_note.notes(tmp_path) == []
    (tmp_path / doctor_note.DOCTOR_FILE).write_text('{"found": ["node1: cannot reach node0: a firewall"]}\n')
    (note,) = doctor_note.notes(tmp_path)
    assert note.endswith("after it failed to connect: node1: cannot reach node0: a firewall")
    (tmp_path / doctor_note.DOCTOR_FILE).write_text('{"found": []}')
    assert doctor_note.notes(tmp_path) == [
        "lab doctor, run on hosts like the job's after it failed to connect, found nothing wrong with them"
    ]
    for junk in ("not json", "[1, 2]", '{"found": "a string"}'):
        (tmp_path / doctor_note.DOCTOR_FILE).write_text(junk)
        assert doctor_note.notes(tmp_path) == []
    (tmp_path / doctor_note.DOCTOR_FILE).unlink()
    (tmp_path / "elsewhere.json").write_text('{"found": ["planted"]}')
    os.symlink(tmp_path / "elsewhere.json", tmp_path / doctor_note.DOCTOR_FILE)  # a job's link is not followed
    assert doctor_note.notes(tmp_path) == []


def test_a_doctor_that_cannot_run_leaves_the_card_as_it_was(tmp_path, monkeypatch):
    """The card is what the user came for: no hosts to be had is one line, not the card's place."""
    import argparse

    from lab.doctor import after_failure
    from lab.errors import LabError
    from lab.topology import Topology

    def no_hosts(*args, **kwargs):
        raise LabError("netns hosts: every /24 of 10.213.0.0/16 is in use")

    monkeypatch.setattr(after_failure.runtimes, "from_args", no_hosts)
    card = Card(first=failure(2, CANNOT_MEET[0]))
    said: list[str] = []
    after_failure.diagnose(argparse.Namespace(runtime="local"), tmp_path, Topology(), card, log=said.append)
    assert card.notes == [] and not (tmp_path / doctor_note.DOCTOR_FILE).exists()
    assert said[-1] == "lab doctor could not run after the failure: netns hosts: every /24 of 10.213.0.0/16 is in use"


def test_on_ray_machines_the_card_names_the_command_instead_of_probing_from_a_folder_they_lack(tmp_path, monkeypatch):
    """A Ray cluster's machines share only the run dir: the doctor's own temp run dir would be this
    machine's alone, its probes never meeting. Nothing is brought up; the card says what to run."""
    import argparse

    from lab.doctor import after_failure
    from lab.topology import Topology

    def brought_up(*args, **kwargs):
        raise AssertionError("no hosts may be brought up for a Ray job's failure")

    monkeypatch.setattr(after_failure.runtimes, "from_args", brought_up)
    card = Card(first=failure(2, CANNOT_MEET[0]))
    after_failure.diagnose(argparse.Namespace(runtime="ray"), tmp_path, Topology(), card, log=lambda line: None)
    assert card.notes == ["`lab doctor --runtime ray` with the job's flags checks what stops nodes meeting"]
    assert not (tmp_path / doctor_note.DOCTOR_FILE).exists()
