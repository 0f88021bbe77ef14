"""Checkpoints: atomic, verified, newest two kept, bad ones set aside."""

import torch

from lab.workloads import checkpoint


def test_save_keeps_the_newest_two_and_leaves_no_temp_files(tmp_path):
    for step in (10, 20, 30):
        checkpoint.save(tmp_path, step, {"step": step, "w": torch.arange(3)})
    assert [p.name for p in checkpoint.checkpoints(tmp_path)] == ["step_00000030.ckpt", "step_00000020.ckpt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000020.ckpt", "step_00000030.ckpt"]
    assert checkpoint.read(tmp_path / "step_00000030.ckpt")["step"] == 30


def test_a_flipped_byte_is_detected_and_the_previous_checkpoint_used(tmp_path):
    checkpoint.save(tmp_path, 10, {"step": 10})
    newest = checkpoint.save(tmp_path, 20, {"step": 20})
    data = bytearray(newest.read_bytes())
    data[-5] ^= 0xFF
    newest.write_bytes(bytes(data))
    seen = []
    path, state = checkpoint.load_newest_valid(tmp_path, lambda p, why: seen.append((p.name, why)))
    assert state["step"] == 10 and path.name == "step_00000010.ckpt"
    assert seen[0][0] == "step_00000020.ckpt" and "checksum mismatch" in seen[0][1]
    assert (tmp_path / "step_00000020.ckpt.bad").exists()


def test_a_truncated_file_is_not_a_checkpoint(tmp_path):
    path = checkpoint.save(tmp_path, 10, {"step": 10})
    path.write_bytes(path.read_bytes()[:20])
    assert checkpoint.load_newest_valid(tmp_path, lambda p, why: None) is None
