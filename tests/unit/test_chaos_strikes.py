"""Each chaos kind lands through the Node faults its declaration names (a runtime's refusal speaks
for a kind by them: lab.exercises.grid), and hits the ranks the campaign then watches.

The drill here records what it is asked to inject instead of reaching nodes: what the faults do to
real processes is proven by tests/test_chaos.py's campaigns; this proves which faults each kind asks
for, for every kind, in milliseconds."""

from __future__ import annotations

import pytest

from lab.chaos import strikes
from lab.chaos.schedule import KINDS, Planned
from lab.errors import LabError
from lab.health import injected_error

PAUSE = int(injected_error.PAUSE_SIGNAL)

WORLD, PER_NODE = 4, 2


class RecordingDrill:
    store_host = "node0"
    ckpt_dir = "/run/lab/checkpoints"

    def __init__(self) -> None:
        self.injected: list[tuple[str, str, dict]] = []

    def locate(self, rank: int) -> tuple[str, int]:
        return f"node{rank // PER_NODE}", rank % PER_NODE

    def inject(self, node: str, fault: str, **kwargs) -> dict:
        self.injected.append((node, fault, kwargs))
        # As the Node's record of a fault: a kill's result is the pid it hit; a rank's place is
        # taken by a new process after its first kill has been looked at twice (not yet reaped).
        kills = [k for n, f, k in self.injected if (n, f) == (node, "kill_worker") and k == kwargs]
        return {"fault": fault, "node": node, "result": 1000 + max(0, len(kills) - 2)}

    def events(self) -> list[dict]:
        """Rank 0's save, paused midway once it was told to pause (kill-in-save waits for that)."""
        told = [k for _, f, k in self.injected if f == "kill_worker" and k.get("sig") == PAUSE]
        return [{"event": "save_paused", "rank": 0, "time": 9e12, "path": "ckpt/step_40.pt"}] if told else []

    def progress(self, message: str) -> None:
        pass

    def ended(self) -> None:
        return None


class SavingProgress:
    """Steps that reach the next checkpoint step a few polls after they are first read."""

    def __init__(self) -> None:
        self.step = 37

    def poll(self) -> None:
        self.step += 1

    def front(self) -> int:
        return self.step


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(strikes.time, "sleep", lambda seconds: None)


def test_every_declared_kind_has_a_strike_and_every_strike_a_declaration():
    assert set(strikes.STRIKES) == set(KINDS)


def test_kill_replacement_hits_the_rank_and_then_the_process_in_its_place():
    drill = RecordingDrill()
    hit = strikes.strike(drill, SavingProgress(), Planned(1.0, "kill-replacement", 0.6, 0.5), WORLD, 20)
    assert hit == [2]
    assert [(n, f, k["local_rank"]) for n, f, k in drill.injected] == [("node1", "kill_worker", 0)] * 3


@pytest.mark.parametrize(("draw", "first_node"), [(0.0, "node0"), (0.99, "node1")])
def test_a_node_lost_in_a_restart_is_never_the_stores_and_comes_back(draw, first_node):
    drill = RecordingDrill()
    hit = strikes.strike(drill, SavingProgress(), Planned(1.0, "lose-node-in-restart", draw, 0.5), WORLD, 20)
    assert [f for _, f, _ in drill.injected] == ["kill_worker", "kill_node", "restart"]
    assert drill.injected[0][0] == first_node and drill.injected[1][0] == drill.injected[2][0] == "node1"
    assert sorted(hit) == sorted({int(draw * WORLD), 2, 3})


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("draw", [0.0, 0.3, 0.6, 0.99])
def test_each_kind_injects_only_the_node_faults_it_declares_and_hits_ranks_of_the_world(kind, draw):
    drill = RecordingDrill()
    hit = strikes.strike(drill, SavingProgress(), Planned(1.0, kind, draw, 0.5), WORLD, 20)
    asked = {fault for _, fault, _ in drill.injected}
    assert asked and asked <= set(KINDS[kind].injects), (kind, asked)
    assert hit and set(hit) <= set(range(WORLD)) and len(set(hit)) == len(hit)
    struck_nodes = {node for node, _, _ in drill.injected}
    assert struck_nodes == {drill.locate(r)[0] for r in hit}, (kind, struck_nodes, hit)


@pytest.mark.parametrize("draw", [0.0, 0.6, 0.99])
def test_a_node_lost_is_every_rank_of_it_and_only_a_node_other_than_the_stores_comes_back(draw):
    drill = RecordingDrill()
    hit = strikes.strike(drill, SavingProgress(), Planned(1.0, "kill-node", draw, 0.5), WORLD, 20)
    node = drill.locate(hit[0])[0]
    assert sorted(hit) == [r for r in range(WORLD) if drill.locate(r)[0] == node]
    restarted = [f for n, f, _ in drill.injected if f == "restart"]
    assert restarted == ([] if node == drill.store_host else ["restart"])


@pytest.mark.parametrize("draw", [0.0, 0.6, 0.99])
def test_losing_the_store_hits_the_stores_host_whatever_rank_was_drawn(draw):
    drill = RecordingDrill()
    hit = strikes.strike(drill, SavingProgress(), Planned(1.0, "lose-store", draw, 0.5), WORLD, 20)
    assert {drill.locate(r)[0] for r in hit} == {drill.store_host}
    assert [f for _, f, _ in drill.injected] == ["kill_node"]


@pytest.mark.parametrize("second", [0.0, 0.5, 0.99])
def test_a_kill_in_the_regroup_hits_two_different_ranks(second):
    drill = RecordingDrill()
    hit = strikes.strike(drill, SavingProgress(), Planned(1.0, "kill-in-regroup", 0.3, second), WORLD, 20)
    assert len(hit) == 2 and hit[0] != hit[1]
    assert [f for _, f, _ in drill.injected] == ["kill_worker", "kill_worker"]


def test_a_kill_after_save_waits_for_the_next_checkpoint_step():
    drill, progress = RecordingDrill(), SavingProgress()
    strikes.strike(drill, progress, Planned(1.0, "kill-after-save", 0.3, 0.5), WORLD, 20)
    assert progress.front() >= 40 and len(drill.injected) == 1


@pytest.mark.parametrize(
    ("kind", "sig"),
    [
        ("rank-exception", injected_error.SIGNAL),
        ("hang-in-python", injected_error.WAIT_SIGNAL),
    ],
)
@pytest.mark.parametrize("draw", [0.0, 0.6, 0.99])
def test_a_fault_from_inside_signals_the_drawn_rank_with_its_own_signal(kind, sig, draw):
    drill = RecordingDrill()
    hit = strikes.strike(drill, SavingProgress(), Planned(1.0, kind, draw, 0.5), WORLD, 20)
    assert hit == [int(draw * WORLD)]
    node, local = drill.locate(hit[0])
    assert drill.injected == [(node, "kill_worker", {"local_rank": local, "sig": int(sig)})]


def test_kill_in_save_pauses_rank_0s_save_then_kills_it_inside_whatever_rank_was_drawn():
    drill = RecordingDrill()
    hit = strikes.strike(drill, SavingProgress(), Planned(1.0, "kill-in-save", 0.99, 0.5), WORLD, 20)
    assert hit == [0]
    assert [k["sig"] for _, _, k in drill.injected] == [PAUSE, 9]  # told to pause, then SIGKILLed inside
    assert {n for n, _, _ in drill.injected} == {"node0"}


def test_a_slow_rank_is_let_go_and_needs_no_new_process():
    drill = RecordingDrill()
    hit = strikes.strike(drill, SavingProgress(), Planned(1.0, "slow-rank", 0.6, 0.5), WORLD, 20)
    assert [f for _, f, _ in drill.injected] == ["slow_worker", "unslow_worker"]
    assert hit == [2] and not KINDS["slow-rank"].kills


@pytest.mark.parametrize("draw", [0.0, 0.6])
def test_corrupt_checkpoint_stops_the_rank_damages_the_trainers_newest_checkpoint_then_kills_it(draw):
    drill = RecordingDrill()
    hit = strikes.strike(drill, SavingProgress(), Planned(1.0, "corrupt-checkpoint", draw, 0.5), WORLD, 20)
    node, local = drill.locate(hit[0])
    assert hit == [int(draw * WORLD)]
    assert drill.injected == [
        (node, "pause_worker", {"local_rank": local}),
        (node, "corrupt_checkpoint", {"directory": "/run/lab/checkpoints", "mode": "truncate"}),
        (node, "kill_worker", {"local_rank": local, "sig": 9}),
    ]


def faults_of(*pairs: tuple[str, str]) -> list[dict]:
    return [{"node": node, "fault": fault} for node, fault in pairs]


@pytest.mark.parametrize(
    ("kind", "faults", "ends"),
    [
        (
            "lose-node-in-restart",
            faults_of(("node0", "kill_worker"), ("node1", "kill_node"), ("node1", "restart")),
            False,
        ),
        (
            "lose-node-in-restart",
            faults_of(("node1", "kill_worker"), ("node1", "kill_node"), ("node1", "restart")),
            False,
        ),
        ("lose-store", faults_of(("node0", "kill_node")), True),
        ("kill-node", faults_of(("node1", "kill_node"), ("node1", "restart")), False),
        ("kill-node", faults_of(("node0", "kill_node")), True),
        ("preempt-node", faults_of(("node1", "preempt")), True),
        ("kill-worker", faults_of(("node0", "kill_worker")), False),
    ],
)
def test_the_job_is_started_again_only_when_its_stores_node_is_lost_whole_or_it_was_preempted(kind, faults, ends):
    from lab.chaos.campaign import ends_the_job

    assert ends_the_job(RecordingDrill(), kind, faults) is ends


def test_kill_replacement_says_in_one_line_when_nothing_took_the_ranks_place(monkeypatch):
    class NothingComesBack(RecordingDrill):
        def inject(self, node: str, fault: str, **kwargs) -> dict:
            if self.injected:
                raise LabError(f"{node} has no worker with local rank {kwargs['local_rank']} (has: [])")
            return super().inject(node, fault, **kwargs)

    monkeypatch.setattr(strikes, "SECOND_KILL_WITHIN_S", 0.05)
    with pytest.raises(LabError, match=r"no process took rank 2's place within 0 s \(node1 has no worker"):
        strikes.strike(NothingComesBack(), SavingProgress(), Planned(1.0, "kill-replacement", 0.6, 0.5), WORLD, 20)
