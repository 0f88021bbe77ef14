"""A full disk, as the card reads it (lab.why.disk_full) and as the lab makes one (the disk-full fault of
lab.health.injected_error): real writes to /dev/full, whose every write the kernel refuses with ENOSPC."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from lab.bench.grading import kind_of
from lab.health import injected_error
from lab.node.faulty_saves import onto_a_full_disk
from lab.why import disk_full
from lab.workloads import checkpoint


@pytest.fixture
def fault_handler():
    """The fault's handler installed in this process, and the process's own put back after."""
    before = signal.signal(injected_error.DISK_FULL_SIGNAL, injected_error.fill_disk)
    yield
    signal.signal(injected_error.DISK_FULL_SIGNAL, before)
    injected_error.written_to("")  # a flag a test left set is spent


@pytest.mark.parametrize("size", [8, 1000, 1 << 20])  # torch says it in other words for a small object
def test_torch_save_meets_torchs_own_error_once_then_saves_again(tmp_path, fault_handler, size):
    save = onto_a_full_disk(torch.save)
    save({"w": torch.zeros(8)}, tmp_path / "before.pt")
    os.kill(os.getpid(), injected_error.DISK_FULL_SIGNAL)
    with pytest.raises(RuntimeError) as caught:
        save({"w": torch.zeros(size)}, f=str(tmp_path / "during.pt"))
    assert disk_full.full(str(caught.value)) and disk_full.note(str(caught.value)), caught.value
    assert not (tmp_path / "during.pt").exists()
    save({"w": torch.zeros(8)}, tmp_path / "after.pt")  # one failed write, not a disk full for good
    assert torch.load(tmp_path / "after.pt")["w"].shape == (8,)


def test_a_save_to_a_file_object_is_left_alone(tmp_path, fault_handler):
    os.kill(os.getpid(), injected_error.DISK_FULL_SIGNAL)
    with open(tmp_path / "object.pt", "wb") as f:
        onto_a_full_disk(torch.save)({"w": torch.ones(2)}, f)
    assert torch.load(tmp_path / "object.pt")["w"].sum() == 2


def test_the_trainers_checkpoint_write_meets_enospc_and_keeps_its_last_checkpoint(tmp_path, fault_handler):
    checkpoint.save(tmp_path, 1, {"step": 1})
    os.kill(os.getpid(), injected_error.DISK_FULL_SIGNAL)
    with pytest.raises(OSError) as caught:
        checkpoint.save(tmp_path, 2, {"step": 2})
    assert disk_full.full(str(caught.value)) and not disk_full.note(str(caught.value))
    assert [p.name for p in checkpoint.checkpoints(tmp_path)] == ["step_00000001.ckpt"]


@pytest.mark.parametrize(
    ("error", "full"),
    [
        ("RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598", True),
        (
            "RuntimeError: [enforce fail at inline_container.cc:857] . "
            "PytorchStreamWriter failed writing file data/37: file write failed",
            True,
        ),  # fmt: skip
        ("OSError: [Errno 28] No space left on device", True),
        ("RuntimeError: basic_ios::clear: iostream error", True),
        ("OSError: [Errno 122] Disk quota exceeded: 'ckpt/step_1.ckpt'", True),
        ("RuntimeError: rank 2: exception injected by the lab's rank-exception drill", False),
        ("OSError: [Errno 2] No such file or directory: 'data.bin'", False),
        ("ValueError: expected 28 features", False),
    ],
)
def test_which_errors_are_a_full_disk(error, full):
    assert disk_full.full(error) is full
    if full:
        assert kind_of(disk_full.how(error)) == "disk-full"


def test_the_trainers_failed_save_is_the_first_of_its_records():
    records = [
        {"event": "checkpoint_failed", "time": 9.0, "rank": 0, "node": "node0", "step": 12, "reason": "later"},
        {"event": "step", "time": 1.0, "rank": 0, "step": 3},
        {"event": "checkpoint_failed", "time": 5.0, "rank": 0, "node": "node0", "step": 8, "reason": "[Errno 28] x"},
    ]
    found = disk_full.first_failed_write(records)
    assert found is not None and found.step == 8 and found.disk_full and "rank 0 on node0" in found.text()
    assert disk_full.first_failed_write(records[1:2]) is None
