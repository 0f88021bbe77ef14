"""What the card adds to the rank it names (lab.why.card_notes), function by function on cards and
failures made here: which silent rank hung, a group that never formed, an error every rank shares,
ranks that left first, why no rank failed of its own, and what the first rank's error or signal
means. (The same notes drawn from real runs: tests/unit/test_diagnosis.py and the recorded cells.)"""

from __future__ import annotations

import signal

from lab.health.stragglers import SlowNetwork
from lab.node import worker_record
from lab.why import card_notes, disk_full, mismatch
from lab.why.bad_checkpoint import SetAside
from lab.why.disk_full import FailedWrite
from lab.why.failure_card import Card, RankFailure
from lab.why.lost_store import StoreLoss

KILLED = -signal.SIGKILL


def failure(rank: int, error: str = "", exit_code: int | None = 1, pid: int | None = None, node: str = "node0"):
    return RankFailure(rank, node, rank % 2, 100.0 + rank, exit_code, pid=pid or 1000 + rank, error=error)


def test_of_several_silent_ranks_only_the_one_that_took_the_sigkill_is_the_hung_one():
    peer, frozen, also = (
        failure(0, exit_code=-signal.SIGTERM),
        failure(1, exit_code=KILLED),
        failure(2, exit_code=KILLED),
    )
    assert card_notes.hung_ranks([peer, frozen]) == [frozen]
    assert card_notes.hung_ranks([peer, frozen, also]) == [peer, frozen, also]  # two took it: no telling
    assert card_notes.hung_ranks([frozen]) == [frozen]
    assert card_notes.hung_ranks([peer, failure(3, exit_code=-signal.SIGTERM)]) == [peer, failure(3, exit_code=-15)]


def test_a_group_that_never_formed_is_no_rank_s_failure_and_says_where_to_look():
    card = Card(first=None)
    refused = [failure(3, "RuntimeError: Connection refused"), failure(1, "gloo connectFullMesh failed"), failure(0)]
    assert card_notes.never_formed(card, refused) == refused[0]
    assert card.certain is False
    assert card.notes == [
        "ranks 1, 3 could not connect to their peers, so the group never formed and no rank hung in it: the hosts' "
        "network (an interface, a firewall, a name), not a rank's own failure; `lab doctor` checks it"
    ]
    untouched = Card(first=None)
    assert card_notes.never_formed(untouched, [failure(0, "ValueError: bad batch")]) is None
    assert untouched.certain and untouched.notes == []


def test_the_same_error_on_several_ranks_is_a_cause_they_share():
    nan = "FloatingPointError: loss is nan at step 7"
    card = Card(first=None)
    card_notes.note_a_shared_error(card, [failure(2, nan), failure(1, "ValueError: other"), failure(0, nan)])
    assert card.certain is False and card.notes == [
        f"ranks 0, 2 each raised the same error ({nan}): a cause they share (the code, the data, a setting), not "
        "one rank; which was noticed first says nothing"
    ]
    long = "E" * 200
    card = Card(first=None)
    card_notes.note_a_shared_error(card, [failure(0, long), failure(1, long)])
    assert f"({'E' * 120}):" in card.notes[0] and "E" * 121 not in card.notes[0]
    for alone in ([failure(0, nan)], [failure(0, nan), failure(1, "ValueError: other")], []):
        card = Card(first=None)
        card_notes.note_a_shared_error(card, alone)
        assert card.certain and card.notes == [], alone


def test_a_worker_that_neither_failed_nor_was_stopped_left_first(tmp_path):
    for node, pids in (("node0", {0: 500, 1: 501}), ("node1", {0: 600, 1: 601})):
        (tmp_path / "nodes" / node).mkdir(parents=True)
        worker_record.write(tmp_path / "nodes" / node / "workers.json", 0, pids)
    failed = [failure(0, "timeout", pid=500), failure(2, "timeout", pid=600, node="node1")]  # ranks 0, 2: local 0
    stopped = {601}
    left = card_notes.left_first(tmp_path, failed, stopped)
    assert [(f.rank, f.node, f.local_rank, f.pid, f.exit_code) for f in left] == [(1, "node0", 1, 501, 0)]
    assert left[0].how == "exited 0 while its peers were still in the job: it left first"
    assert left[0].time == failed[0].time
    assert card_notes.left_first(tmp_path, failed, {501, 601}) == []


def test_each_node_s_first_rank_comes_from_a_failure_there_and_an_unreadable_node_is_passed_over(tmp_path):
    for node, pids in (("node0", {0: 500, 1: 501}), ("node1", {0: 600, 1: 601})):
        (tmp_path / "nodes" / node).mkdir(parents=True)
        worker_record.write(tmp_path / "nodes" / node / "workers.json", 0, pids)
    on_node1 = RankFailure(3, "node1", 1, 100.0, 1, pid=601)  # rank 3 is node1's local rank 1: node1 starts at 2
    assert list(card_notes.node_workers(tmp_path, [on_node1])) == [("node1", 2, 0, 600), ("node1", 3, 1, 601)]


def test_a_node_whose_ranks_give_no_single_base_is_not_read(tmp_path):
    (tmp_path / "nodes" / "node0").mkdir(parents=True)
    worker_record.write(tmp_path / "nodes" / "node0" / "workers.json", 0, {0: 500, 1: 501})
    unplaced = RankFailure(0, "node0", None, 100.0, 1, pid=500)
    assert list(card_notes.node_workers(tmp_path, [unplaced])) == []
    two_bases = [failure(0, pid=500), RankFailure(3, "node0", 0, 100.0, 1, pid=9)]  # rank 3 at local 0: base 3
    assert list(card_notes.node_workers(tmp_path, two_bases)) == []
    assert list(card_notes.node_workers(tmp_path, [failure(0, pid=500)])) == [
        ("node0", 0, 0, 500),
        ("node0", 1, 1, 501),
    ]


def test_with_no_cause_the_note_names_the_hung_rank_or_says_why_none_can_be():
    card = Card(first=failure(1, exit_code=KILLED))
    card_notes.note_no_cause(card, [card.first], None, None)
    assert card.certain and card.notes == [
        "rank 1 raised nothing while its peers failed waiting for it (a timeout or a lost connection), and torchrun "
        "had to stop it: the likely hung rank"
    ]
    card = Card(first=failure(1))
    card_notes.note_no_cause(card, [failure(1), failure(3)], None, None)
    assert card.certain is False and card.notes == [
        "ranks 1, 3 raised nothing and torchrun had to stop them (a hung rank, or a peer stopped before its own "
        "timeout said so): which one hung is unknown"
    ]
    lost = StoreLoss("connection reset", ["node1"], False, 9, killed={"node0": "SIGKILL"})
    both = StoreLoss("connection reset", [], False, 9, killed={"node0": "SIGKILL", "node1": "SIGKILL"})
    cut = SlowNetwork("node1", [2, 3], 9, 1.0, 2.0, 0.001, {}, cut=True)
    slow = SlowNetwork("node1", [2, 3], 9, 1.0, 2.0, 0.001, {}, cut=False)
    for store, network, who in (
        (lost, cut, "node0 died with its agent, unreported"),
        (both, None, "node0, node1 died with its agent, unreported"),
        (None, cut, "node1 was cut off the network (below)"),
        (None, slow, "a rank hung or a node was cut off"),
        (None, None, "a rank hung or a node was cut off"),
    ):
        card = Card(first=failure(0))
        card_notes.note_no_cause(card, [], store, network)
        assert card.certain is False
        assert card.notes == [
            f"every failed rank reports a peer's failure (a timeout or a lost connection): {who}; the earliest "
            "report is shown first"
        ]


def test_the_first_error_s_meaning_a_full_disk_a_mismatch_an_oom_kill():
    short = "RuntimeError: [enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file"
    card = Card(first=failure(0, short))
    card_notes.note_the_first_error(card, set(), lambda: "")
    assert card.notes == [disk_full.TORCH_NOTE] and card.certain  # torch's words hide the kernel's reason
    said = Card(first=failure(0, "OSError: [Errno 28] No space left on device"))
    card_notes.note_the_first_error(said, set(), lambda: "")
    assert said.notes == []  # the error says it
    size = "RuntimeError: [enforce fail] Received data size doesn't match expected size"
    card = Card(first=failure(0, size))
    card.first.how = "raised RuntimeError"
    card_notes.note_the_first_error(card, set(), lambda: "")
    assert card.first.how == f"raised RuntimeError: {mismatch.SIZE_HOW}" and card.certain is False
    assert card.notes == [mismatch.SIZE_NOTE]
    plain = Card(first=failure(0, "ValueError: bad batch"))
    card_notes.note_the_first_error(plain, set(), lambda: "")
    assert plain.notes == [] and plain.certain


def test_a_sigkill_nobody_in_the_job_sent_is_read_in_the_kernel_log():
    pid = 4321
    kernel = f"6,1,2,-;Memory cgroup out of memory: Killed process {pid} (python) total-vm:1kB\n"
    card = Card(first=failure(1, exit_code=KILLED, pid=pid))
    card_notes.note_the_first_error(card, set(), lambda: kernel)
    assert card.first.how == "killed by the kernel's OOM killer (SIGKILL)"
    assert card.notes == [f"kernel log: Memory cgroup out of memory: Killed process {pid} (python) total-vm:1kB"]
    card = Card(first=failure(1, exit_code=KILLED, pid=pid))
    card_notes.note_the_first_error(card, set(), lambda: "6,1,2,-;Out of memory: Killed process 1 (x)\n")
    assert card.first.how == "" and card.notes == [
        "SIGKILL from outside the job, and the kernel log names no OOM kill of its pid: a scheduler, a person, or a "
        "kernel log this user cannot read"
    ]
    sent = Card(first=failure(1, exit_code=KILLED, pid=pid))  # torchrun's own SIGKILL: nothing to read
    card_notes.note_the_first_error(sent, {pid}, lambda: kernel)
    assert sent.notes == [] and sent.first.how == ""


def test_the_card_written_out_line_by_line():
    first = RankFailure(1, "node0", 1, 100.0, KILLED, pid=77, error="ValueError: bad", where="train.py:9", how="raised")
    first.last_step = 12
    then = [
        RankFailure(3, "node1", 1, 101.26, 1, error="RuntimeError: peer gone", how="raised RuntimeError"),
        RankFailure(2, "node1", 0, 99.9, 1, error="x", how="died of x"),  # its error already in its how
    ]
    card = Card(first, then, rounds=2, notes=["one", "two"])
    assert card.text() == (
        "first failure: rank 1 on node0 (local rank 1, pid 77): raised\n"
        "  ValueError: bad  at train.py:9\n"
        "  its last step: 12\n"
        "then rank 3 on node1, +1.3 s: raised RuntimeError (RuntimeError: peer gone)\n"
        "then rank 2 on node1, -0.1 s: died of x\n"
        "the group failed 2 times in all (restarts)\n"
        "note: one\n"
        "note: two\n"
    )
    once = Card(RankFailure(0, "node0", None, 1.0, 0, how="exited 0"), rounds=1)
    assert once.text() == "first to stop: rank 0 on node0: exited 0\n"
    nowhere = RankFailure(0, "node0", None, 10.0, 1, error="ValueError: x", how="raised ValueError")
    close = [
        RankFailure(1, "node0", None, 9.99, 1, how="a"),  # -0.01 s: said +0.0, not -0.0
        RankFailure(2, "node0", None, 10.449, 1, how="b"),  # rounded once: +0.4
    ]
    assert Card(nowhere, close).text() == (
        "first failure: rank 0 on node0: raised ValueError\n  ValueError: x\n"
        "then rank 1 on node0, +0.0 s: a\nthen rank 2 on node0, +0.4 s: b\n"
    )


def test_an_uncertain_card_says_so_first_and_lists_the_candidates_not_the_consequences():
    first = RankFailure(3, "node1", 1, 1.0, 1, pid=5, how="exited with status 1")
    peer = RankFailure(1, "node0", 1, 1.1, 1, how="exited with status 1")
    consequence = RankFailure(0, "node0", 0, 1.2, 1, how="raised", consequence=True)
    card = Card(first, [peer, consequence], certain=False)
    assert card.text().splitlines()[0] == (
        "first failure: one of ranks 1, 3, which first is unknown; seen first: rank 3 on node1 (local rank 1, pid 5): "
        "exited with status 1"
    )
    alone = Card(first, [consequence], certain=False)
    assert alone.text().splitlines()[0] == (
        "first failure: not certain which rank; seen first: rank 3 on node1 (local rank 1, pid 5): exited with status 1"
    )


def test_a_card_with_no_failure_keeps_its_findings_and_notes_and_its_json_every_field():
    lost = StoreLoss("connection reset", ["node1"], True, 9)
    written = FailedWrite(0, "node0", 20, "OSError: [Errno 28] No space left on device")
    card = Card(None, notes=["a note", "another"], store_loss=lost, failed_write=written)
    assert card.text() == (
        f"no rank failed: the agents recorded no failure\n{lost.text()}\n{written.text()}\nnote: a note\n"
        "note: another\n"
    )
    aside = SetAside(1, "node0", 10, "ckpt/step10.pt", "digest mismatch")
    records = Card(None, failed_write=written, set_aside=aside).to_json()
    assert records["failed_write"] == {"rank": 0, "node": "node0", "step": 20, "reason": written.reason}
    assert records["set_aside"]["path"] == "ckpt/step10.pt" and records["set_aside"]["step"] == 10
    as_json = card.to_json()
    assert (
        as_json["first"] is None
        and as_json["store_loss"]["agents"] == ["node1"]
        and as_json["notes"] == ["a note", "another"]
    )
    assert set(as_json) == {
        "first", "then", "rounds", "notes", "certain", "straggler", "slow_network", "store_loss", "failed_write",
        "set_aside",
    }  # fmt: skip
    full = Card(failure(1), [failure(2)], rounds=3, certain=False).to_json()
    assert full["first"]["rank"] == 1 and [t["rank"] for t in full["then"]] == [2]
    assert (full["rounds"], full["certain"]) == (3, False)
