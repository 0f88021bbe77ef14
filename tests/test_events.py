"""The event log survives a writer killed mid-line."""

from lab.health.events import EventLog, read_events


def test_an_event_log_torn_by_a_kill_keeps_the_next_process_records(tmp_path):
    (tmp_path / "rank0.jsonl").write_text('{"time": 1, "event": "step", "rank": 0, "step": 1}\n{"time": 2, "ev')
    EventLog(tmp_path, rank=0, local_rank=0).write("start")
    assert [e["event"] for e in read_events(tmp_path)] == ["step", "start"]
