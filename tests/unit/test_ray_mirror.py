"""What a machine with a disk of its own sends the driver (lab.runtimes.ray_mirror.changes), where
the driver puts it (placed) and how (files.put_beneath): on real files, no Ray (the copying
between machines runs in tests/test_ray_own_disks.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab import files
from lab.rundir import LAB_ENTRIES
from lab.runtimes.ray_mirror import KNOWN_DIR, SHARE_TOKEN, changes, placed


def copy(machine: Path, driver: Path, known: dict, node: str = "node1", budget: int = 1 << 20) -> list:
    """One round as Mirror._pull does it, with the node's files at `machine`."""
    pieces = changes(machine, known, budget)
    for relative, offset, data, ino, mtime in pieces:
        known[relative] = (ino, mtime, offset + len(data))
        files.put_beneath(driver, placed(node, relative), data, offset)
    return pieces


def test_a_growing_log_comes_as_what_was_added_and_a_replaced_file_whole(tmp_path):
    machine, driver = tmp_path / "machine", tmp_path / "driver"
    (machine / "nodes" / "node1").mkdir(parents=True)
    driver.mkdir()
    log = machine / "nodes" / "node1" / "node.log"
    log.write_text("step 0\n")
    known: dict = {}
    assert [(p[0], p[1], p[2]) for p in copy(machine, driver, known)] == [("nodes/node1/node.log", 0, b"step 0\n")]
    with open(log, "a") as f:
        f.write("step 1\n")
    assert [(p[1], p[2]) for p in copy(machine, driver, known)] == [(7, b"step 1\n")]
    assert copy(machine, driver, known) == [], "nothing new: nothing sent"
    workers = machine / "nodes" / "node1" / "workers.json"
    workers.write_text('{"0": 101}')
    copy(machine, driver, known)
    replacement = machine / "nodes" / "node1" / ".workers.tmp"
    replacement.write_text('{"0": 202}')  # the same size, another inode: as an atomic rewrite makes it
    os.replace(replacement, workers)
    copy(machine, driver, known)
    assert (driver / "nodes" / "node1" / "workers.json").read_text() == '{"0": 202}'
    log.write_text("new\n")  # the same inode, shorter: whole again
    copy(machine, driver, known)
    assert (driver / "nodes" / "node1" / "node.log").read_text() == "new\n"


def test_files_outside_the_nodes_own_folder_get_its_name_and_checkpoints_and_the_token_stay(tmp_path):
    machine, driver = tmp_path / "machine", tmp_path / "driver"
    for folder in ("events", "checkpoints", "reference/checkpoints", "prometheus/targets"):
        (machine / folder).mkdir(parents=True)
    (machine / "events" / "rank2.jsonl").write_text('{"step": 1}\n')
    (machine / "prometheus" / "targets" / "rank2.json").write_text("[]")
    (machine / "checkpoints" / "step_10.pt").write_bytes(b"weights")
    (machine / "reference" / "checkpoints" / "step_10.pt").write_bytes(b"weights")
    (machine / SHARE_TOKEN).write_text("not the driver's")
    driver.mkdir()
    copy(machine, driver, {})
    found = sorted(str(p.relative_to(driver)) for p in driver.rglob("*") if p.is_file())
    assert found == ["events/rank2.node1.jsonl", "prometheus/targets/rank2.node1.json"]
    assert placed("node1", "nodes/node1/node.log") == "nodes/node1/node.log"
    assert placed("node1", "nodes/node0/node.log") == "nodes/node0/node.node1.log", "another node's folder"


def test_a_record_larger_than_one_call_comes_over_several(tmp_path):
    machine, driver = tmp_path / "machine", tmp_path / "driver"
    (machine / "events").mkdir(parents=True)
    driver.mkdir()
    data = bytes(range(256)) * 40  # 10,240 bytes
    (machine / "events" / "rank0.jsonl").write_bytes(data)
    known: dict = {}
    sizes = []
    while pieces := copy(machine, driver, known, budget=4096):
        sizes.append(sum(len(p[2]) for p in pieces))
    assert sizes == [4096, 4096, 2048]
    assert (driver / "events" / "rank0.node1.jsonl").read_bytes() == data


def test_a_link_on_the_machine_is_not_followed_and_one_planted_here_is_not_written_through(tmp_path):
    machine, driver, outside = tmp_path / "machine", tmp_path / "driver", tmp_path / "outside"
    (machine / "events").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("root's")
    (machine / "events" / "rank0.jsonl").symlink_to(outside / "secret")
    assert changes(machine, {}) == [], "a link the job made on its machine is never read"
    (driver / "events").mkdir(parents=True)
    (driver / "events" / "rank1.node1.jsonl").symlink_to(outside / "secret")
    with pytest.raises(files.UnsafePath, match="never followed"):
        files.put_beneath(driver, "events/rank1.node1.jsonl", b"x", 0)
    (driver / "nodes").symlink_to(outside)
    with pytest.raises(files.UnsafePath, match="nodes: a link, never followed"):
        files.put_beneath(driver, "nodes/node1/node.log", b"x", 0)
    for bad in ("../escape", "/etc/passwd", "events/../../x", ""):
        with pytest.raises(files.UnsafePath, match="not a path beneath"):
            files.put_beneath(driver, bad, b"x", 0)
    assert (outside / "secret").read_text() == "root's" and sorted(os.listdir(outside)) == ["secret"]


def test_a_fifo_planted_where_a_copy_goes_is_refused_at_once(tmp_path):
    (tmp_path / "events").mkdir()
    os.mkfifo(tmp_path / "events" / "rank0.node1.jsonl")
    with pytest.raises(OSError):
        files.put_beneath(tmp_path, "events/rank0.node1.jsonl", b"x", 0)


def test_lab_down_removes_what_the_copying_writes_in_the_run_dir():
    assert {SHARE_TOKEN, KNOWN_DIR} <= set(LAB_ENTRIES)


def test_only_what_the_lab_writes_for_the_nodes_is_carried_to_a_machine(tmp_path):
    from lab.errors import LabError
    from lab.runtimes.ray_mirror import put

    put(tmp_path, "events/forensics/request", b"1765000000.5")
    put(tmp_path, "reference/events/forensics/request", b"1765000001.5")
    assert (tmp_path / "events" / "forensics" / "request").read_text() == "1765000000.5"
    assert (tmp_path / "reference" / "events" / "forensics" / "request").read_text() == "1765000001.5"
    for other in ("events/rank0.jsonl", "nodes/node1/node.log", "../events/forensics/request", "state.json"):
        with pytest.raises(LabError, match="not a file the lab carries"):
            put(tmp_path, other, b"x")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "events/forensics/request",
        "reference/events/forensics/request",
    ]
