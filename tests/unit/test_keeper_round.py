"""A rank whose collective timed out (a peer hangs in Python, still beating), or that regrouped
where no rank held the job's state, makes its keeper fall back to a restart of the whole group
(lab.node.inprocess.rounds). The keeper is real, with a real TCPStore; its ranks and spares are small
stand-in processes: rank 0 exits with TIMED_OUT_EXIT (or NO_STATE_EXIT) at once, rank 1 hangs (a
long sleep) until the round stops it."""

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

KEEPER = textwrap.dedent(
    """
    import argparse, subprocess, sys
    import torch.distributed as dist
    from lab.node.inprocess import keeper as k
    from lab.inprocess.heartbeat import ABSENT_EXIT, NO_STATE_EXIT, TIMED_OUT_EXIT

    STATUS = {"timed-out": TIMED_OUT_EXIT, "no-state": NO_STATE_EXIT, "absent": ABSENT_EXIT}

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    args = argparse.Namespace(store="-", node_rank=0, nodes=1, nproc_per_node=2, events_dir=sys.argv[1], script=["-"])
    args.max_replacements = int(sys.argv[2])
    if sys.argv[3] == "back":  # the keeper lost with its node: its first spare had been given rank 1
        store.add("keeper/node0/incarnations", 1)
        store.set("spare/node0/1/0", "1,1,3")
    keeper = k.Keeper(args, store)
    argvs = iter([
        ["sh", "-c", f"exit {STATUS[sys.argv[4]]}"],  # rank 0
        ["sleep", "600"],  # rank 1: the one that hangs
        ["sleep", "1"],  # the spare: rank 0 in the restart
        ["sleep", "1"],  # rank 1, started afresh
        ["sleep", "600"],  # the next spare
    ])
    if sys.argv[3] == "back":  # its node was in the job before: its beat is in the store
        store.set("keeper/node0/beat", "41")
        argvs = iter([["sleep", "1"], ["sleep", "1"], ["sleep", "600"]])  # the spare, rank 1, the next spare

    def start(extra, env):
        print("start", extra, sorted(env.items()), flush=True)
        return subprocess.Popen(next(argvs), preexec_fn=k.die_with_parent)

    keeper._start = start
    code = k.run_until_stopped(keeper)
    first = keeper.spares_started and f"spare/node0/{keeper.incarnation}/0"
    print("assigned", store.get(first).decode() if first and store.check([first]) else None, flush=True)
    sys.exit(code)
    """
)


def run_keeper(events, budget: int, how: str = "hang", status: str = "timed-out") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", KEEPER, str(events), str(budget), how, status],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def rounds_recorded(events) -> list[dict]:
    records = [json.loads(line) for f in events.glob("agent-*.jsonl") for line in f.read_text().splitlines()]
    return [r["torchelastic"]["metadata"] for r in records if r["torchelastic"]["name"] == "lab.group_restarted"]


@pytest.mark.parametrize(
    ("status", "why"),
    [("timed-out", "rank 0's collective timed out"), ("no-state", "no rank held the job's state when rank 0")],
)
def test_a_rank_asking_for_a_round_restarts_every_rank_of_the_node_afresh_and_is_recorded(tmp_path, status, why):
    done = run_keeper(tmp_path, budget=1, status=status)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ranks restart from the checkpoint in generation 1 (round 1; replacement 1 of 1)" in done.stdout
    # The spare takes rank 0 as a fresh start (it loads the checkpoint, not a peer's state), rank 1
    # starts as at the job's start: neither is told it replaces a rank among survivors.
    assert "assigned 0,0,1,fresh" in done.stdout, done.stdout
    restarted = [line for line in done.stdout.splitlines() if line.startswith("start [] ")][2:]
    assert restarted == ["start [] [('LOCAL_RANK', '1'), ('RANK', '1')]"], done.stdout
    rounds = rounds_recorded(tmp_path)
    assert [(r["round"], r["generation"]) for r in rounds] == [(1, 1)] and rounds[0]["why"].startswith(why)
    assert f"[keeper node0] {why}" in done.stdout, done.stdout


def test_a_keeper_back_on_a_lost_node_asks_for_a_round_and_starts_its_ranks_in_it(tmp_path):
    """Its node's beat is in the store: it does not start its ranks in generation 0 (their peers
    wait in another), it asks for a round, and they start in the round's generation, afresh."""
    done = run_keeper(tmp_path, budget=1, how="back")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "assigned 0,0,1,fresh" in done.stdout, done.stdout
    started = [line for line in done.stdout.splitlines() if line.startswith("start ")]
    assert started[0].startswith("start ['--spare'") and len(started) == 3, started  # the spare first, no rank
    # Under a key of its own: the lost keeper's first spare key holds an old assignment (rank 1 of
    # generation 3), which a spare of the new keeper would otherwise take at once and run.
    assert started[0].startswith("start ['--spare', 'spare/node0/2/0']"), started
    rounds = rounds_recorded(tmp_path)
    assert rounds == [{"round": 1, "generation": 1, "why": "node 0's keeper came back after the node was lost"}]


def test_a_rank_whose_peers_never_came_ends_the_job_at_once_with_its_budget_untouched(tmp_path):
    """ABSENT_EXIT: no round, no spare, whatever budget is left; rank 1 (hanging) is stopped."""
    done = run_keeper(tmp_path, budget=3, status="absent")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[keeper node0] rank 0's peers never came: the job ends" in done.stdout, done.stdout
    assert rounds_recorded(tmp_path) == [] and "assigned None" in done.stdout, done.stdout


def test_with_the_budget_spent_the_job_ends_in_one_line(tmp_path):
    done = run_keeper(tmp_path, budget=0)
    assert done.returncode == 1, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if "spent" in line]
    assert said == [
        "[keeper node0] rank 0's collective timed out: a peer hangs, alive but not in it; "
        "this node's 0 replacement(s) are spent: the job ends"
    ]
