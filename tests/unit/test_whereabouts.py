"""Where a rank runs and how far it has got, as a drill asks while the logs grow: the answers a
whole read of the logs gives (lab.health.events.read_events), from only what was appended."""

from __future__ import annotations

import io
import json

import pytest

from lab.errors import LabError
from lab.exercises.drill import Drill
from lab.health.events import read_events
from lab.rundir import RunDir
from lab.runtimes.local import LocalRuntime
from lab.topology import Topology


def start(when: float, rank: int, node: str, local_rank: int) -> dict:
    return {"time": when, "event": "start", "rank": rank, "node": node, "local_rank": local_rank, "restart": 0}


def step(when: float, rank: int, number: int) -> dict:
    return {"time": when, "event": "step", "rank": rank, "step": number}


def append(events, rank: int, *records: dict, torn: str = "") -> None:
    with open(events / f"rank{rank}.jsonl", "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records) + torn)


def drill_on(events) -> Drill:
    runtime = LocalRuntime(RunDir(events.parent / "run"))  # its nodes write where the drill reads
    return Drill(runtime, Topology(nodes=2, nproc_per_node=1), {}, events, "", None, out=io.StringIO())  # type: ignore[arg-type]


def whole_read(events, rank: int) -> tuple[tuple[str, int], int]:
    """What the drill answered before: every log read whole."""
    records = list(read_events(events))
    starts = [r for r in records if r["event"] == "start" and r["rank"] == rank]
    steps = [r["step"] for r in records if r["event"] == "step" and r["rank"] == rank]
    return (starts[-1]["node"], starts[-1]["local_rank"]), max(steps, default=0)


def test_a_rank_moved_by_a_recovery_is_found_where_it_started_last_and_its_steps_keep_counting(tmp_path):
    drill = drill_on(tmp_path)
    append(tmp_path, 1, start(100.0, 1, "node1", 0), step(100.5, 1, 1), step(100.6, 1, 2))
    assert (drill.locate(1), drill.last_step(1)) == (("node1", 0), 2) == whole_read(tmp_path, 1)
    # The node is lost; the rank starts again on node 0 as its local rank 1, a torn line after.
    append(tmp_path, 1, start(105.0, 1, "node0", 1), step(105.4, 1, 3), torn='{"time": 106.0, "ev')
    assert (drill.locate(1), drill.last_step(1)) == (("node0", 1), 3)
    with open(tmp_path / "rank1.jsonl", "a") as f:
        f.write("\n")  # the next writer ends the torn line first (EventLog does): one bad line
    append(tmp_path, 1, step(105.5, 1, 4))
    assert (drill.locate(1), drill.last_step(1)) == (("node0", 1), 4)


def test_an_older_start_read_later_does_not_move_the_rank_back(tmp_path):
    """Files are read one after another: the newest start by its time wins, as in a sorted read."""
    drill = drill_on(tmp_path)
    append(tmp_path, 0, start(200.0, 0, "node1", 1))
    assert drill.locate(0) == ("node1", 1)
    append(tmp_path, 0, start(150.0, 0, "node0", 0))  # a stale record, written late
    assert drill.locate(0) == ("node1", 1) == whole_read(tmp_path, 0)[0]


def test_a_rank_not_yet_started_is_one_line_and_a_log_started_afresh_is_read_from_its_start(tmp_path):
    drill = drill_on(tmp_path)
    with pytest.raises(LabError, match="rank 0 has not started"):
        drill.locate(0)
    append(tmp_path, 0, start(100.0, 0, "node0", 0), *(step(100.0 + s, 0, s) for s in range(1, 40)))
    assert drill.last_step(0) == 39
    (tmp_path / "rank0.jsonl").write_text(json.dumps(start(300.0, 0, "node1", 0)) + "\n")  # a fresh run
    assert drill.locate(0) == ("node1", 0)


def test_a_drill_pointed_at_another_events_folder_reads_that_one(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    append(first, 0, start(1.0, 0, "node0", 0))
    append(second, 0, start(2.0, 0, "node1", 0))
    drill = drill_on(first)
    assert drill.locate(0) == ("node0", 0)
    drill.events_dir = second
    assert drill.locate(0) == ("node1", 0)


def test_a_link_planted_in_the_events_folder_is_not_followed(tmp_path):
    """The nodes write the events folder: a rank file that is a link is no log of theirs."""
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps(start(1.0, 0, "node9", 0)) + "\n")
    events = tmp_path / "events"
    events.mkdir()
    (events / "rank0.jsonl").symlink_to(outside)
    with pytest.raises(LabError, match="has not started"):
        drill_on(events).locate(0)


def test_asking_again_and_again_reads_each_byte_of_the_logs_once(tmp_path, monkeypatch):
    """The cost that grew with an hour-long campaign: every question read every log whole."""
    from lab import files

    taken: list[int] = []
    real = files.read_from

    def counted(path, offset, limit):
        read = real(path, offset, limit)
        taken.append(len(read[0]) if read else 0)
        return read

    monkeypatch.setattr(files, "read_from", counted)
    drill = drill_on(tmp_path)
    for rank in (0, 1):
        append(tmp_path, rank, start(1.0, rank, f"node{rank}", 0), *(step(1.0 + s, rank, s) for s in range(1, 500)))
    for _ in range(50):
        assert drill.locate(1) == ("node1", 0) and drill.last_step(0) == 499
    append(tmp_path, 0, step(600.0, 0, 500))
    assert drill.last_step(0) == 500
    assert sum(taken) == sum(p.stat().st_size for p in tmp_path.glob("rank*.jsonl"))


def test_a_long_reference_is_waited_for_while_it_steps_and_one_that_stops_stepping_is_not(tmp_path, monkeypatch):
    """An unpaced reference of a long campaign ran past a fixed 240 s bound on a busy machine,
    stepping all the while: the wait is bounded by its silence, not by its length."""
    from lab.exercises import drill as drill_module
    from lab.exercises.drill import TimedOut

    drill = drill_on(tmp_path)
    append(tmp_path, 0, start(1.0, 0, "node0", 0))
    looks = {"n": 0}

    def running_for(polls: int):
        def codes() -> dict:
            looks["n"] += 1
            return {"node0": 0 if looks["n"] > polls else None}

        return codes

    real_sleep = drill_module.time.sleep

    def stepping(seconds: float) -> None:  # the job steps between two looks
        real_sleep(0.05)
        append(tmp_path, 0, step(2.0 + looks["n"], 0, looks["n"]))

    monkeypatch.setattr(drill, "exit_codes", running_for(30))
    monkeypatch.setattr(drill_module.time, "sleep", stepping)
    assert drill.wait_job_while_stepping(tmp_path, stall_s=0.4) == {"node0": 0}  # 1.5 s in all
    looks["n"] = 0
    monkeypatch.setattr(drill, "exit_codes", running_for(10**6))
    monkeypatch.setattr(drill_module.time, "sleep", lambda seconds: real_sleep(0.05))  # stepping no more
    asked = []  # where forensics looked: the reference's own events, not the drill's job's
    monkeypatch.setattr(
        drill_module.forensics, "where_they_stand", lambda d, w, e, relay: asked.append(d) or "rank 0 at X"
    )
    reference = tmp_path
    drill.events_dir = tmp_path / "the-drills-own-job"
    with pytest.raises(TimedOut, match=r"^no step for 0s waiting for the job to end \(at step 30\): rank 0 at X$"):
        drill.wait_job_while_stepping(reference, stall_s=0.4)
    assert asked == [reference]


def test_a_start_past_what_one_chunk_of_a_log_holds_is_found(tmp_path, monkeypatch):
    from lab.health import tail

    monkeypatch.setattr(tail, "CHUNK", 256)
    append(
        tmp_path, 0, start(1.0, 0, "node0", 0), *(step(1.0 + s, 0, s) for s in range(1, 60)), start(90.0, 0, "node1", 1)
    )
    assert drill_on(tmp_path).locate(0) == ("node1", 1)
