"""Where kill-in-save's pause (lab.health.injected_error, SIGRTMIN+8) stops each kind of save, seen
from inside the pause: half a file's bytes, or a DCP step's files without what makes it whole.
And that a save nobody paused is the same save, byte for byte. Real torch saves, one process."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import filesystem

from lab.health import injected_error
from lab.node import faulty_saves
from lab.workloads import checkpoint, checkpoint_dcp

STATE = {"w": torch.arange(1000, dtype=torch.float32), "step": 7}


class Log:
    """An event log that keeps what is written, and what the disk held when it was."""

    def __init__(self, look=lambda: None):
        self.records, self.look = [], look

    def write(self, event, **fields):
        self.records.append({"event": event, **fields, "seen": self.look()})


@pytest.fixture
def pause(monkeypatch):
    """The pause armed as the signal arms it, lasting no time; disarmed after the test."""
    monkeypatch.setattr(injected_error, "PAUSE_S", 0.0)
    yield lambda: injected_error.pause_next_save(signal.SIGRTMIN + 8, None)
    injected_error._pause.armed = False


def torch_bytes(obj, tmp_path: Path, name: str) -> bytes:
    """What torch.save writes to a file of that name (its archive is named after the file)."""
    (tmp_path / "plain").mkdir(exist_ok=True)
    torch.save(obj, tmp_path / "plain" / name)
    return (tmp_path / "plain" / name).read_bytes()


def test_a_paused_torch_save_holds_half_its_bytes_in_the_pause_and_all_of_them_after(tmp_path, pause):
    path = tmp_path / "snapshot.pt"
    log = Log(look=lambda: path.read_bytes())
    save = faulty_saves.paused_torch_save(torch.save, log)
    whole = torch_bytes(STATE, tmp_path, "snapshot.pt")
    pause()
    save(STATE, str(path))
    (record,) = log.records
    assert record["event"] == "save_paused" and record["path"] == str(path) and record["how"] == "torch.save"
    assert record["seen"] == whole[: len(whole) // 2]
    assert path.read_bytes() == whole and not injected_error.save_pauses()  # spent by this save


def test_an_unpaused_torch_save_is_torchs_own_and_a_file_object_is_never_paused(tmp_path, pause):
    log = Log()
    save = faulty_saves.paused_torch_save(torch.save, log)
    save(STATE, tmp_path / "a.pt")
    pause()
    with open(tmp_path / "b.pt", "wb") as f:
        save(STATE, f)
    assert (tmp_path / "a.pt").read_bytes() == torch_bytes(STATE, tmp_path, "a.pt")
    with open(tmp_path / "plain" / "b.pt", "wb") as f:
        torch.save(STATE, f)
    assert (tmp_path / "b.pt").read_bytes() == (tmp_path / "plain" / "b.pt").read_bytes()
    assert log.records == [] and injected_error.save_pauses()  # still armed, for the next save to a path


def test_a_paused_dcp_save_has_its_shards_and_no_metadata_in_the_pause(tmp_path, pause, monkeypatch):
    folder = tmp_path / "step15"
    log = Log(look=lambda: sorted(os.listdir(folder)))
    monkeypatch.setattr(filesystem._FileSystemWriter, "finish", filesystem._FileSystemWriter.finish)  # put back after
    faulty_saves.pause_dcp_before_metadata(log)
    pause()
    dcp.save({"w": STATE["w"].clone()}, checkpoint_id=str(folder))
    (record,) = log.records
    assert record["path"] == str(folder) and record["how"] == "dcp.save"
    assert any(name.endswith(".distcp") for name in record["seen"]) and ".metadata" not in record["seen"]
    assert (folder / ".metadata").is_file()


def test_the_trainers_file_is_half_written_under_a_temporary_name_at_its_midway(tmp_path):
    seen: list[tuple[Path, int, list[str]]] = []
    final = checkpoint.save(
        tmp_path, 20, dict(STATE), midway=lambda tmp: seen.append((tmp, tmp.stat().st_size, os.listdir(tmp_path)))
    )
    ((tmp, size, names),) = seen
    assert tmp.parent == tmp_path and tmp.name.startswith(".step_00000020.ckpt.") and names == [tmp.name]
    assert size == final.stat().st_size // 2 and checkpoint.read(final)["step"] == 7


def test_the_trainers_dcp_step_is_written_and_not_committed_at_its_midway(tmp_path):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []

    def midway(step, tmp):
        seen.append((step, tmp, sorted(p.name for p in tmp.iterdir()), sorted(p.name for p in tmp_path.iterdir())))

    store = checkpoint_dcp.ShardedCheckpoints(tmp_path, rank=0, distributed=False, midway=midway)
    committed = store.save(model, optimizer, 30, {"world_size": 1})
    ((step, tmp, inside, beside),) = seen
    assert step == 30 and tmp.name == ".dcp_00000030.tmp" and beside == [".dcp_00000030.tmp"]
    assert ".metadata" in inside and checkpoint_dcp.MANIFEST not in inside  # written, not whole yet
    assert committed == tmp_path / "dcp_00000030" and checkpoint_dcp.steps(tmp_path) == [committed]
