"""Several ranks saving one checkpoint file (lab.exercises.script.writers), judged on save events
as lab.node.user_script records them: the path as the script gave it and the file it named
(device, inode) once written."""

from __future__ import annotations

from lab.exercises.script import writers


def saved(rank: int, path: str, file: tuple[int, int] | None, how: str = "torch.save") -> dict:
    event = {"time": 1.0 + rank, "event": "saved", "rank": rank, "path": path, "how": how}
    return {**event, "file": list(file)} if file else event


def test_every_rank_saving_one_file_is_flagged_with_the_ranks_and_the_advice():
    events = [saved(rank, "checkpoint.pth.tar", (2049, 77)) for rank in range(4)] * 3
    assert writers.shared_writes(events) == [{"path": "checkpoint.pth.tar", "ranks": [0, 1, 2, 3]}]
    said = writers.said(writers.shared_writes(events))
    assert "4 ranks (0, 1, 2, 3) each wrote checkpoint.pth.tar" in said and writers.ADVICE in said


def test_one_path_that_is_a_file_per_node_or_per_rank_is_not_one_file():
    """Each pod's own volume (another device), a save through a temporary file renamed into place
    (a new inode each time), a file per rank, rank 0 alone, DCP's one checkpoint by every rank."""
    per_volume = [saved(rank, "/ckpt/snapshot.pt", (40 + rank, 12)) for rank in range(2)]
    renamed = [saved(rank, "snapshot.pt", (2049, 100 + rank)) for rank in range(2)]
    per_rank = [saved(rank, f"rank{rank}.pt", (2049, 12)) for rank in range(2)]
    rank_0 = [saved(0, "snapshot.pt", (2049, 12)), saved(0, "snapshot.pt", (2049, 12))]
    dcp = [saved(rank, "step-40", (2049, 9), how="dcp.save") for rank in range(4)]
    unknown = [saved(rank, "snapshot.pt", None) for rank in range(2)]  # gone before it was looked at
    for events in (per_volume, renamed, per_rank, rank_0, dcp, unknown):
        assert writers.shared_writes(events) == [], events
    assert writers.said([]) == ""


def test_more_than_one_shared_file_is_counted():
    events = [saved(rank, name, (1, ino)) for rank in range(2) for name, ino in (("a.pt", 5), ("b.pt", 6))]
    assert writers.said(writers.shared_writes(events)).count("and 1 more file(s)") == 1


def test_one_file_named_two_ways_is_one_file_and_other_records_do_not_stop_the_count():
    events = [
        {"time": 0.5, "event": "loaded", "rank": 0, "path": "ckpt.pt", "how": "torch.load", "file": [2049, 12]},
        saved(0, "/work/my run/ckpt.pt", (2049, 12)),
        saved(1, "ckpt.pt", (2049, 12)),
    ]
    assert writers.shared_writes(events) == [{"path": "/work/my run/ckpt.pt", "ranks": [0, 1]}]
    assert writers.said(writers.shared_writes(events)) == (
        "; 2 ranks (0, 1) each wrote /work/my run/ckpt.pt, one file at once: a rank killed mid-write tears it for "
        f"all; {writers.ADVICE}"
    )
