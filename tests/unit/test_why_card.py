"""`lab why`'s card on failed jobs recorded from real runs (tests/fixtures/why/: what `lab run`
kept when tests/scripts/fail_one_rank.py failed on netns hosts, by scripts/record-fixtures.sh):
rank 1 of a 2 x 2 job raises, is SIGKILLed, exits with a status, or hangs until its peers' 5 s
process-group timeout. The card must name rank 1, say how, and (raised) where. The kernel log is
given: the test machine's own never decides a verdict here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lab.why import card as why
from lab.why import evidence

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "why"
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fail_one_rank.py"
RAISE_LINE = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "raise ValueError" in text)


def card_of(how: str, kernel: str = "") -> str:
    return why.card(FIXTURES / how, kernel=lambda: kernel).text()


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("raise", ["raised ValueError", "ValueError: bad batch at step 5", f"fail_one_rank.py:{RAISE_LINE}"]),
        ("kill", ["killed by SIGKILL", "SIGKILL from outside the job"]),
        ("exit", ["exited with status 3"]),
        ("hang", ["killed by SIGTERM from torchrun's agent", "the likely hung rank", "Timed out"]),
    ],
)
def test_the_card_names_the_rank_that_failed_first_and_how(how, expected):
    card = card_of(how)
    # Rank 1 of a 2 x 2 job lives on node0 as its local rank 1.
    assert card.startswith("first failure: rank 1 on node0 (local rank 1, pid "), card
    for text in expected:
        assert text in card, card
    later = [line for line in card.splitlines() if line.startswith("then rank ")]  # what the others did next
    assert later and all(not line.startswith("then rank 1 ") for line in later), card


def test_a_sigkill_the_kernel_log_names_is_an_oom_kill():
    first = why.card(FIXTURES / "kill", kernel=lambda: "").first
    assert first is not None and first.pid is not None
    line = f"6,1234,5678,-;Memory cgroup out of memory: Killed process {first.pid} (python3.11) total-vm:1kB"
    card = card_of("kill", kernel=f"{line}\n")
    assert "killed by the kernel's OOM killer (SIGKILL)" in card
    assert f"note: kernel log: Memory cgroup out of memory: Killed process {first.pid}" in card
    another_pid = line.replace(f"Killed process {first.pid} ", "Killed process 1 ")
    assert "SIGKILL from outside the job" in card_of("kill", kernel=another_pid)  # someone else's OOM kill


def test_nothing_failed_is_said_so(tmp_path):
    assert why.card(tmp_path, kernel=lambda: "").text() == "no rank failed: the agents recorded no failure\n"


def test_the_kept_evidence_never_follows_a_link_a_node_planted(tmp_path):
    run, secret = tmp_path / "run", tmp_path / "secret"
    (run / "events").mkdir(parents=True)
    (run / "nodes" / "node0").mkdir(parents=True)
    secret.mkdir()
    (secret / "node.log").write_text("not the lab's")
    (secret / "rank0.jsonl").write_text("not the lab's")
    (run / "events" / "rank0.jsonl").symlink_to(secret / "rank0.jsonl")
    (run / "events" / "rank1.jsonl").write_text('{"event": "step"}\n')
    (run / "nodes" / "node1").symlink_to(secret, target_is_directory=True)
    (run / "nodes" / "node0" / "node.log").write_bytes(b"x" * (evidence.LOG_TAIL_BYTES + 10) + b"the end\n")
    kept = evidence.keep(run, tmp_path / "kept")
    found = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
    assert found == ["events/rank1.jsonl", "nodes/node0/node.log"]
    log = (kept / "nodes" / "node0" / "node.log").read_text()
    assert len(log) == evidence.LOG_TAIL_BYTES and log.endswith("the end\n")
    assert not any(os.path.islink(p) for p in kept.rglob("*"))


def test_the_kept_evidence_holds_the_network_probes_so_a_cut_node_is_named_again(tmp_path):
    """A partition is named from the nodes' round trips (lab.health.net_probe): without them the
    card drawn again from kept evidence said less than the live one (found by `lab bench diagnosis`)."""
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    lines = [
        {"time": 100.0 + i / 2, "node": node, "rtt": rtt}
        for i in range(8)
        for node, rtt in (("node0", 0.0002), ("node1", None))
    ]
    (run / "events" / "net-node0.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in lines if p["node"] == "node0")
    )
    (run / "events" / "net-node1.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in lines if p["node"] == "node1")
    )
    live = why.card(run).slow_network
    again = why.card(evidence.keep(run, tmp_path / "kept")).slow_network
    assert live is not None and live.cut and live.node == "node1" and again == live


def test_ranks_that_never_connected_are_not_called_hung():
    """Recorded: the lesson's job on 2 netns hosts with GLOO_SOCKET_IFNAME=lo (`lab up
    --max-restarts 0`); node0's ranks fail in gloo's connectFullMesh (Connection refused), and
    torchrun stops the rest. No rank hung: the group never formed. The card said "the likely hung
    rank" of a rank that had raised; it now says the hosts' network, and the grade says so too."""
    from lab.bench.grading import named

    card = why.card(FIXTURES / "cannot_connect", kernel=lambda: "")
    text = card.text()
    assert "so the group never formed and no rank hung in it" in text and "`lab doctor` checks it" in text, text
    assert "the likely hung rank" not in text, text
    assert card.first is not None and "connectFullMesh" in card.first.error
    assert named(card).kind == "cannot-connect" and named(card).rank is None
