"""In-process recovery's fallback on real keepers (lab.node.inprocess.fallback): faults no spare
survives, after which both keepers restart every rank of the group from the checkpoint (a rank
hung in Python, a node lost whole and started again), and a fresh rank later to its group than
the collectives' timeout, which is waited for. Spares taking a lost rank's place, and a keeper
lost for good: tests/test_recovery_styles.py."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.bench import free_port, recovery_styles
from lab.bench.recovery_styles import in_session, stop_sessions
from lab.health import injected_error
from lab.health.events import read_agent_events, read_events
from lab.workloads import script_path

pytestmark = pytest.mark.slow


def trainer_keeper(events: Path, port: int, node: int, timeout_s: float = 60) -> subprocess.Popen:
    """Node `node` of a 2 x 2 in-process job of the lab's trainer (30 steps, a checkpoint every 5
    in one shared folder), its keeper in a session of its own, its output in keeper<node>.log
    beside the events (keeper_logs, for a keeper that ends otherwise than expected)."""
    trainer = [script_path("trainer"), "--steps=30", "--step-time=0.05", "--ckpt-every=5", "--ckpt-shared"]
    return in_session(
        [
            *(sys.executable, "-m", "lab.node.inprocess.keeper", f"--store=127.0.0.1:{port}", f"--node-rank={node}"),
            *("--nodes=2", "--nproc-per-node=2", "--max-replacements=1", f"--events-dir={events}", "--"),
            *(*trainer, f"--ckpt-dir={events.parent / 'ckpt'}", f"--events-dir={events}"),
        ],
        env={
            **recovery_styles.one_thread_each(),
            "LAB_PG_TIMEOUT_S": str(timeout_s),
            "TORCHRUN_LAB_NODE": f"node{node}",
        },
        log=events.parent / f"keeper{node}.log",
    )


def keeper_logs(events: Path) -> str:
    return "\n".join(f"-- {log.name}:\n{log.read_text()[-4000:]}" for log in sorted(events.parent.glob("keeper*.log")))


def wait_for_step(events: Path, step: int) -> None:
    deadline = time.monotonic() + 120
    while not (events.exists() and any(e["event"] == "step" and e["step"] >= step for e in read_events(events))):
        assert time.monotonic() < deadline, f"the job never reached step {step}"
        time.sleep(0.05)


def assert_every_rank_restarted_from_one_checkpoint(events: Path, since: float) -> list[dict]:
    """One round, heard on both nodes; every rank started afresh after `since`, loaded the same
    checkpoint and finished with the others' weights. The rounds' records."""
    rounds = [a for a in read_agent_events(events) if a["name"] == "lab.group_restarted"]
    assert sorted(a["node"] for a in rounds) == ["node0", "node1"], rounds
    assert {a["event"]["metadata"]["round"] for a in rounds} == {1}
    after = [e for e in read_events(events) if e["time"] > since]
    assert sorted(e["rank"] for e in after if e["event"] == "start") == [0, 1, 2, 3]
    loaded = {e["rank"]: e["step"] for e in after if e["event"] == "checkpoint_loaded"}
    assert sorted(loaded) == [0, 1, 2, 3] and len(set(loaded.values())) == 1 and loaded[0] >= 10, loaded
    exits = [e for e in after if e["event"] == "exit"]
    assert sorted(e["rank"] for e in exits) == [0, 1, 2, 3] and {e["step"] for e in exits} == {30}
    assert len({e["checksum"] for e in exits}) == 1
    return rounds


def test_a_rank_hung_in_python_makes_the_keepers_restart_every_rank_from_the_checkpoint(tmp_path):
    """Issue 31's fault in-process cannot survive: rank 1 waits for ever in Python (SIGRTMIN+7), its
    threads running, so it still beats and no keeper ends it. Its peers' gloo collectives time out
    (4 s here), each leaves with status 76, and both keepers agree on one restart of the whole
    group (lab.node.inprocess.rounds): every rank, the hung one too, starts afresh, loads the newest
    checkpoint and trains to the end. (The drill's verdict on the same, bit-identity included, is
    judged on its recorded run in tests/unit/test_judges.py: hang-rank-in-python.)"""
    events, port, timeout_s = tmp_path / "events", free_port(), 4
    keepers = [trainer_keeper(events, port, node, timeout_s) for node in range(2)]
    try:
        wait_for_step(events, 12)
        pid = next(e["pid"] for e in read_events(events) if e["event"] == "start" and e["rank"] == 1)
        hung = time.time()
        os.kill(pid, injected_error.WAIT_SIGNAL)
        assert [k.wait(120) for k in keepers] == [0, 0], keeper_logs(events)
    finally:
        stop_sessions(keepers)
    rounds = assert_every_rank_restarted_from_one_checkpoint(events, hung)
    assert min(a["time"] for a in rounds) - hung >= timeout_s * 0.9  # it took the timeout: nothing ended it sooner


def test_a_rank_later_to_its_group_than_the_collectives_timeout_is_waited_for(tmp_path):
    """A rank may come to a generation long after the others (a fresh one starting under load, as
    a round restarts every rank): the others wait for it as long as a rendezvous waits for its
    nodes (the keepers' --return-timeout), not the collectives' timeout. Seen under load in the
    suite: the others' join timed out, they asked for a round, and its fresh ranks, as slow, spent
    the budget. Here the last rank comes 5 s late to a job whose collectives time out after 2 s."""
    port, out = free_port(), tmp_path / "out"
    out.mkdir()
    script = [str(Path(__file__).parent / "user_scripts" / "late_to_join.py"), "5", str(out)]
    keepers = [
        in_session(
            [
                *(
                    sys.executable,
                    "-m",
                    "lab.node.inprocess.keeper",
                    f"--store=127.0.0.1:{port}",
                    f"--node-rank={node}",
                ),
                *("--nodes=2", "--nproc-per-node=1", "--max-replacements=0", "--return-timeout=30", "--", *script),
            ],
            env={**os.environ, "LAB_PG_TIMEOUT_S": "2"},
        )
        for node in range(2)
    ]
    try:
        assert [k.wait(60) for k in keepers] == [0, 0]
    finally:
        stop_sessions(keepers)
    assert sorted((p.name, p.read_text()) for p in out.iterdir()) == [("rank0", "2\n"), ("rank1", "2\n")]


def test_a_node_lost_whole_and_started_again_restarts_every_rank_from_the_checkpoint(tmp_path):
    """Issue 31's other fault no spare survives: node 1's keeper SIGKILLed, its ranks with it. Node 0's
    keeper hears the silence, stops its ranks and waits; node 1's keeper started again (the same
    command, as the kill-node drill's restart does) finds its node's beat in the store and asks for a
    round, and every rank restarts from the checkpoint."""
    events, port = tmp_path / "events", free_port()
    keepers = [trainer_keeper(events, port, node) for node in range(2)]
    try:
        wait_for_step(events, 12)
        killed = time.time()
        os.killpg(keepers[1].pid, signal.SIGKILL)
        keepers[1].wait(10)
        deadline = time.monotonic() + 30
        while not any(a["name"] == "lab.keeper_lost" for a in read_agent_events(events)):
            assert time.monotonic() < deadline, "node 0's keeper never heard node 1's go"
            time.sleep(0.1)
        keepers.append(trainer_keeper(events, port, 1))
        assert [keepers[0].wait(120), keepers[2].wait(120)] == [0, 0], keeper_logs(events)
    finally:
        stop_sessions(keepers)
    rounds = assert_every_rank_restarted_from_one_checkpoint(events, killed)
    assert {a["event"]["metadata"]["why"] for a in rounds} == {"node 1's keeper came back after the node was lost"}
