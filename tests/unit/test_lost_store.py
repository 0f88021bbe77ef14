"""A rendezvous store lost mid-run: what the agents do (lab.node.store_loss), what `lab why`
says (lab.why.lost_store) and the coordinators bench's verdict (lab.bench.coordinator_cell).

The cards are drawn from cells of `lab bench coordinators` kept by scripts/record-fixtures.sh
(tests/fixtures/coordinators/: a 2 x 2 trainer job on loopback hosts whose store was SIGKILLed
after step 20: node 0's agent under c10d and under the lab's backend, the lab's etcd under
etcd-v2), each beside the verdict the bench gave it; how `lab bench diagnosis` grades a card on
a lost store (lab.bench.grading). The agent-side tests use real torch stores, exceptions and event
records, in this process."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from torch.distributed import DistStoreError, TCPStore
from torch.distributed.elastic import events
from torch.distributed.elastic.events import handlers as event_handlers
from torch.distributed.elastic.rendezvous import RendezvousConnectionError

from lab.bench.coordinator_cell import COORDINATORS, KILL_AT, Cell, judged
from lab.bench.grading import FAULTS, Named, grade, named
from lab.health.agent_exporter import EVENT_HANDLER, EventFileHandler
from lab.health.events import AgentEvent, read_agent_events
from lab.node import store_loss
from lab.node.fast_rendezvous import FastRendezvous
from lab.why import card as why
from lab.why.failure_card import Card, RankFailure
from lab.why.lost_store import StoreLoss

KEPT = Path(__file__).resolve().parents[1] / "fixtures" / "coordinators"


def kept(name: str) -> tuple[Path, dict]:
    return KEPT / name, json.loads((KEPT / name / "truth.json").read_text())


@pytest.mark.parametrize("name", ["c10d-local-0", "lab-store-local-0"])
def test_a_store_lost_with_its_host_names_the_host_and_the_agent_that_lost_it(name):
    folder, _ = kept(name)
    card = why.card(folder, kernel=lambda: "")
    lost = card.store_loss
    assert lost is not None
    assert lost.killed == {"node0": "SIGKILL"} and lost.agents == ["node1"]
    assert lost.regroup_failed and not lost.went_on  # node1 lost its peers, and then the store
    assert lost.at_step is not None and lost.at_step >= KILL_AT
    text = card.text()
    assert f"rendezvous store lost after step {lost.at_step}: the agent of node1 could not reach it" in text
    assert "killed: node0 (SIGKILL)" in text
    # The ranks that failed report lost peers only; the note says whose: node0's, unreported.
    assert "node0 died with its agent, unreported" in text
    if name == "lab-store-local-0":  # torch's DistNetworkError says "Failed to recv"; the lab's says what was lost
        assert (
            lost.reason.startswith("the lab's rendezvous store at 127.0.0.1:")
            and "node 0's agent hosts it" in lost.reason
        )
    else:
        assert lost.reason == "The connection to the C10d store has failed."


def test_a_lost_etcd_is_survived_and_said_so():
    folder, _ = kept("etcd-local-0")
    card = why.card(folder, kernel=lambda: "")
    assert card.first is None and card.store_loss is not None
    assert card.store_loss.went_on and not card.store_loss.regroup_failed and card.store_loss.killed == {}
    assert sorted(card.store_loss.agents) == ["node0", "node1"]
    assert card.text().startswith("no rank failed")
    assert "they went on training without it (it is needed only to form a new round)" in card.text()
    assert card.to_json()["store_loss"]["went_on"] is True


SAID = {  # coordinator: (verdict, what the line must say)
    "c10d": ("failed fast", "the agent of node1 could not reach it", "could not regroup", "killed: node0 (SIGKILL)"),
    "lab-store": ("failed fast", "the agent of node1 could not reach it", "killed: node0 (SIGKILL)"),
    "etcd": ("survived", "the agents of node0, node1 could not reach it", "every rank completed its 300 steps"),
}


@pytest.mark.parametrize("name", ["c10d-local-0", "lab-store-local-0", "etcd-local-0"])
def test_the_bench_verdict_is_drawn_again_from_the_kept_evidence(name):
    folder, truth = kept(name)
    cell = Cell(COORDINATORS[truth["coordinator"]], truth["runtime"], truth["trial"])
    again = judged(cell, folder, truth["exit_codes"], truth["seconds"])
    # What each trial was (node0, the store's host, SIGKILLed after step 21) and what a store in
    # node 0's agent must mean for the other node; written down by hand, not the bench's old words.
    verdict, *facts = SAID[truth["coordinator"]]
    assert again.verdict == verdict
    assert again.said.startswith("rendezvous store lost after step 21: "), again.said
    for fact in facts:
        assert fact in again.said, again.said


def test_a_node_still_running_at_the_deadline_is_a_hang():
    folder, truth = kept("c10d-local-0")
    cell = Cell(COORDINATORS["c10d"], "local", 0)
    hung = judged(cell, folder, {"node0": 137, "node1": None}, 41.0)
    assert hung.verdict == "hung" and not hung.within_twice_timeout


def test_no_store_loss_no_line():
    recorded = Path(__file__).resolve().parents[1] / "fixtures" / "why" / "kill"
    card = why.card(recorded, kernel=lambda: "")
    assert card.store_loss is None and "rendezvous store" not in card.text()


class Answers:
    """A rendezvous handler's num_nodes_waiting, raising what it is given (the real error types)."""

    def __init__(self, error: BaseException | None):
        self.error = error

    def get_backend(self) -> str:
        return "c10d"

    def num_nodes_waiting(self) -> int:
        if self.error:
            raise self.error
        return 1


@pytest.fixture
def agent_events(tmp_path, monkeypatch):
    """The agent's event handler, as lab.health.agent_exporter installs it: torch's event and
    rendezvous records land in a file (torch keeps one logger per destination: its handlers are
    swapped for the test's and put back)."""
    path = tmp_path / "events" / "agent-node1.jsonl"
    handler = EventFileHandler(path, "node1")
    loggers = []
    for destination in (EVENT_HANDLER, "dynamic_rendezvous"):
        monkeypatch.setitem(event_handlers._log_handlers, destination, handler)
        logger = events._get_or_create_logger(destination)
        loggers.append((logger, logger.handlers))
        logger.handlers = [handler]
    yield path.parent
    for logger, handlers in loggers:
        logger.handlers = handlers


def test_a_lost_store_is_answered_none_waiting_and_recorded_once(agent_events, capsys):
    ask = store_loss.tolerant(Answers.num_nodes_waiting)
    lost = Answers(RendezvousConnectionError("The connection to the C10d store has failed."))
    assert [ask(lost) for _ in range(3)] == [0, 0, 0]
    records = [r for r in read_agent_events(agent_events) if r["name"] == AgentEvent.STORE_LOST]
    assert len(records) == 1 and records[0]["event"]["metadata"]["backend"] == "c10d"
    assert "the c10d rendezvous store cannot be reached" in capsys.readouterr().err


class Store(Answers):
    """A store that is lost, then comes back; counts how often it is asked."""

    asked = 0

    def num_nodes_waiting(self) -> int:
        self.asked += 1
        return super().num_nodes_waiting()


def test_a_lost_store_is_asked_less_and_less_often_and_heard_again_when_back(agent_events):
    now = [0.0]
    ask = store_loss.tolerant(Store.num_nodes_waiting, clock=lambda: now[0])
    store = Store(RendezvousConnectionError("The connection to etcd has failed."))
    asked_at = []
    for tick in range(600):  # a minute of monitor intervals (0.1 s)
        now[0] = tick / 10
        before = store.asked
        assert ask(store) == 0
        if store.asked > before:
            asked_at.append(now[0])
    gaps = [round(b - a, 1) for a, b in zip(asked_at, asked_at[1:], strict=False)]
    assert gaps[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0][: len(gaps[:6])] and len(asked_at) < 10, gaps
    store.error = None  # the store is back: asked at its next retry, then every interval again
    now[0] += store_loss.RETRY_MAX_S
    assert ask(store) == 1 and ask(store) == 1 and store.asked == len(asked_at) + 2
    store.error = RendezvousConnectionError("The connection to etcd has failed.")  # lost again: news again
    assert ask(store) == 0
    assert len([r for r in read_agent_events(agent_events) if r["name"] == AgentEvent.STORE_LOST]) == 2


@pytest.mark.parametrize("error", [DistStoreError("wait timeout after 1000ms"), ValueError("a bug")])
def test_anything_but_a_lost_connection_still_ends_the_agent(agent_events, error):
    with pytest.raises(type(error)):
        store_loss.tolerant(Answers.num_nodes_waiting)(Answers(error))
    assert not list(agent_events.glob("*.jsonl"))


def test_the_lab_store_names_itself_when_its_host_is_gone(agent_events):
    host = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
    client = TCPStore("127.0.0.1", host.port, is_master=False, use_libuv=True, timeout=timedelta(seconds=5))
    handler = FastRendezvous(client, "run", node_rank=1, nodes=2, local_addr=None, join_timeout_s=5)
    handler._round = 0  # as after its first rendezvous
    assert handler.num_nodes_waiting() == 0
    port = host.port
    del host  # node 0's agent, gone
    with pytest.raises(RendezvousConnectionError, match=f"the lab's rendezvous store at 127.0.0.1:{port} is gone"):
        handler.num_nodes_waiting()
    with pytest.raises(RendezvousConnectionError, match="is gone"):
        handler.next_rendezvous()
    said = [r["message"] for r in read_agent_events(agent_events)]
    assert said and all(m.startswith("RendezvousConnectionError: the lab's rendezvous store") for m in said)


STORE_LOST = next(f for f in FAULTS if f.name == "store-lost")


def rank_failure(rank: int, how: str, *, consequence: bool = False) -> RankFailure:
    found = RankFailure(rank, "node0", rank, 0.0, 1, how=how, consequence=consequence)
    found.last_step = 5
    return found


def test_a_lost_store_is_named_with_no_rank_and_only_when_no_rank_failed_of_its_own():
    """Node 0's agent killed: node1's ranks lose their peers (consequences), node 0's die with
    their agent unreported. A right card names no rank, and the lost store; one naming a rank is
    not right; a store the agents trained on without (etcd) is no failure to name."""
    fault = STORE_LOST
    lost = StoreLoss("the lab's rendezvous store is gone", ["node1"], False, 21, True, {"node0": "SIGKILL"})
    lost_peer = rank_failure(2, "raised RuntimeError", consequence=True)
    card = Card(first=lost_peer, certain=False, store_loss=lost)
    assert named(card) == Named(None, "store-lost", 21)
    result = grade("script", fault, 1, 20, card)
    assert result.right and result.step_ok and result.unknown and not result.wrong_rank
    killed = Card(first=rank_failure(2, "killed by SIGKILL"), store_loss=lost)
    assert named(killed) == Named(2, "killed", 5) and not grade("trainer", fault, 1, 5, killed).right
    went_on = StoreLoss("etcd is gone", ["node0", "node1"], True, 21)
    assert named(Card(first=None, store_loss=went_on)).kind == "unknown"


@pytest.mark.parametrize("kept", ["c10d-local-0", "lab-store-local-0"])
def test_a_store_killed_by_the_coordinators_bench_is_graded_right(kept):
    """The coordinators bench's recorded cells (tests/fixtures/coordinators), graded as `lab bench
    diagnosis` grades a store-lost cell: the coordinators bench killed the store after step 20."""
    folder = KEPT / kept
    card = why.card(folder, kernel=lambda: "")
    result = grade("trainer", STORE_LOST, 0, 20, card)
    assert result.right and result.named_kind == "store-lost" and result.named_rank is None, card.text()
