"""A damaged checkpoint as the card reads it (lab.why.bad_checkpoint): torch's own errors on files
damaged the ways a crash mid-save or a bad disk leaves them, made here with real torch.load,
and the trainer's record of one it set aside."""

from __future__ import annotations

import traceback

import pytest
import torch

from lab.bench.grading import kind_of
from lab.health.error_text import error_text
from lab.health.events import Event
from lab.why import bad_checkpoint


def error_line(exc: BaseException) -> str:
    """The last line of its traceback, as the card reads it from a rank's log."""
    return traceback.format_exception_only(exc)[-1].strip()


@pytest.mark.parametrize(
    "damage",
    [lambda b: b[: len(b) // 2], lambda b: b"", lambda b: b"x" * 100, lambda b: b[:64] + b"\0" * (len(b) - 64)],
    ids=["cut in half", "emptied", "overwritten", "zeroed after its header"],
)
def test_torch_loads_words_for_a_damaged_file_are_read_as_one(tmp_path, damage):
    path = tmp_path / "snapshot.pt"
    torch.save({"model": torch.nn.Linear(8, 8).state_dict(), "step": 5}, path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(Exception) as raised:
        torch.load(path, weights_only=True)
    logged, recorded = error_line(raised.value), error_text(raised.value)  # a node log's, an exit record's
    assert bad_checkpoint.damaged(logged) and bad_checkpoint.damaged(recorded), (logged, recorded)
    how = bad_checkpoint.how(recorded)
    assert how.endswith("a damaged checkpoint") and kind_of(how) == "corrupt-checkpoint"


@pytest.mark.parametrize(
    "error",
    ["RuntimeError: Connection closed by peer", "ValueError: bad batch", "EOFError: EOF when reading a line", ""],
)
def test_other_errors_are_not_a_damaged_file(error):
    assert not bad_checkpoint.damaged(error)


def test_the_first_file_set_aside_names_its_rank_and_the_step_it_was_saved_at():
    records = [
        {"time": 3.0, "event": Event.CHECKPOINT_INVALID, "rank": 2, "node": "node1", "path": "/c/step_00000007.ckpt"},
        {"time": 2.0, "event": Event.CHECKPOINT_INVALID, "rank": 0, "node": "node0", "path": "/c/step_00000007.ckpt",
         "reason": "checksum mismatch: truncated or corrupted (10 bytes)"},
        {"time": 1.0, "event": Event.STEP, "rank": 0, "step": 7},
    ]  # fmt: skip
    found = bad_checkpoint.first_set_aside(records)
    assert found == bad_checkpoint.SetAside(
        0, "node0", 7, "/c/step_00000007.ckpt", "checksum mismatch: truncated or corrupted (10 bytes)"
    )
    assert "rank 0 on node0 could not use /c/step_00000007.ckpt" in found.text()
    assert bad_checkpoint.first_set_aside(records[2:]) is None
    odd = bad_checkpoint.first_set_aside([{**records[0], "path": "elsewhere.bin"}])
    assert odd is not None and odd.step is None


def test_dcps_wrapped_failure_is_recorded_by_the_first_ranks_own_error(tmp_path):
    """dcp.load of a folder a save left without its .metadata raises CheckpointException, whose
    first line is only the ranks' numbers; the exit record says what went wrong on rank 0."""
    import torch.distributed.checkpoint as dcp

    dcp.save({"w": torch.zeros(3)}, checkpoint_id=str(tmp_path))
    (tmp_path / ".metadata").unlink()
    with pytest.raises(BaseException) as raised:  # CheckpointException is a BaseException
        dcp.load({"w": torch.zeros(3)}, checkpoint_id=str(tmp_path))
    recorded = error_text(raised.value)
    assert recorded.startswith("CheckpointException: on rank 0, AssertionError: metadata is None")
    assert ".metadata" in recorded and len(recorded) <= 300
