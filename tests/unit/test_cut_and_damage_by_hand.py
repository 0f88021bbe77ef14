"""The script-side verdicts of kill-in-save (lab.exercises.script.cut) and of corrupt-checkpoint on
a file (lab.exercises.script.damaged), on records written by hand, every time a binary fraction:
which save was cut, which load counts, at the edges of each window, and every word of the details.
Mutation testing found these words and edges unasserted (docs/mutation.md)."""

from __future__ import annotations

from lab.exercises.script import cut, damaged
from lab.health.events import Event
from lab.report import Report

WORK = "/w/run/work/kill-in-save"


def pause(at: float, path: str = f"{WORK}/ckpt/step_15.pt", how: str | None = "torch.save") -> dict:
    return {"event": Event.SAVE_PAUSED, "time": at, "rank": 0, "path": path, **({"how": how} if how else {})}


def load(at: float, path: str, error: str | None = None, rank: int = 1) -> dict:
    kind = Event.LOAD_FAILED if error else Event.LOADED
    return {"event": kind, "time": at, "rank": rank, "path": path, **({"error": error} if error else {})}


def saved(at: float, path: str, rank: int) -> dict:
    return {"event": Event.SAVED, "time": at, "rank": rank, "path": path}


def checked(found: dict, check) -> tuple[bool, str]:
    report = Report("kill-in-save", "local", 4)
    check(report, found)
    (only,) = report.checks
    return only.ok, only.detail


def test_the_cut_is_the_last_pause_at_or_before_the_kill_and_the_load_the_first_after_it():
    events = [pause(9.0, f"{WORK}/ckpt/step_10.pt"), pause(10.0), pause(10.5, f"{WORK}/later.pt")]
    events += [load(10.0, "ckpt/step_10.pt"), load(10.25, "ckpt/step_15.pt"), load(10.75, "ckpt/step_10.pt")]
    found = cut.loaded_cut(events, kill_time=10.0)
    assert found == {
        "path": f"{WORK}/ckpt/step_15.pt",  # paused at the kill's instant: cut; at 10.5, after it: not
        "how": "torch.save",
        "loaded": "ckpt/step_15.pt",  # the load at the kill's instant is not after it
        "error": None,
        "took_cut": True,
        "rewritten_by": [],
    }


def test_a_save_again_counts_only_strictly_between_the_cut_and_the_load():
    events = [pause(10.0, f"{WORK}/checkpoint.pth.tar"), load(12.0, "checkpoint.pth.tar")]
    at_the_cut, at_the_load = saved(10.0, "checkpoint.pth.tar", 2), saved(12.0, "checkpoint.pth.tar", 3)
    assert cut.loaded_cut([*events, at_the_cut, at_the_load], kill_time=11.0)["rewritten_by"] == []
    between = saved(11.5, "checkpoint.pth.tar", 2)
    found = cut.loaded_cut([*events, between, saved(11.25, "other.pt", 3)], kill_time=11.0)
    assert (found["rewritten_by"], found["took_cut"]) == ([2], False)


def test_a_pause_record_without_its_kind_of_save_is_a_torch_save():
    found = cut.loaded_cut([pause(10.0, how=None), load(11.0, "ckpt/step_15.pt")], kill_time=10.5)
    assert found["how"] == "torch.save"


def test_every_word_of_the_cut_details():
    half = {"path": f"{WORK}/ckpt/step_15.pt", "how": "torch.save", "loaded": "ckpt/step_15.pt", "took_cut": True}
    error = "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory. This"
    assert checked({**half, "error": error, "rewritten_by": []}, cut.check) == (
        False,
        "it loaded ckpt/step_15.pt (RuntimeError: PytorchStreamReader failed reading zip archive: failed finding "
        "central directory), which the kill left half written (its torch.save cut midway): a careful script writes "
        "each checkpoint under a temporary name and renames it once whole, and moves a `latest` marker only after that",
    )
    folder = {**half, "path": f"{WORK}/ckpt/step15", "how": "dcp.save", "loaded": "ckpt/step15", "error": None}
    assert checked(folder, cut.check) == (
        False,
        "it loaded ckpt/step15, which the kill left with its shards and no .metadata (its dcp.save cut midway): a "
        "careful script loads only a folder whose save completed (its .metadata there, or a marker written after "
        "dcp.save returned) and falls back to the one before",
    )
    again = {**half, "loaded": "checkpoint.pth.tar", "error": None, "took_cut": False, "rewritten_by": [2, 3]}
    assert checked(again, cut.check) == (
        True,
        "it loaded checkpoint.pth.tar, the file the kill left half written (its torch.save cut midway), whole: "
        "rank(s) 2, 3 saved it again after the cut (which copy a restart finds is a race while several ranks write "
        "one file)",
    )
    over = {**half, "loaded": "ckpt/step_10.pt", "error": None, "took_cut": False, "rewritten_by": []}
    assert checked(over, cut.check) == (
        True,
        f"it passed over {WORK}/ckpt/step_15.pt, which the kill left half written (its torch.save cut midway), and "
        "loaded ckpt/step_10.pt",
    )


def test_every_word_of_the_damaged_file_details_and_the_edge_of_its_window():
    damage = [{"fault": "corrupt_checkpoint", "time": 20.0, "args": {"mode": "truncate"}, "result": f"{WORK}/a.pt"}]
    at_the_damage = load(20.0, "old.pt")
    found = damaged.loaded_file(damage, [at_the_damage, load(20.5, "a.pt")])
    assert found == {"path": f"{WORK}/a.pt", "loaded": "a.pt", "error": None, "took_damaged": True, "in_folder": False}
    assert checked(found, damaged.check_file) == (
        False,
        "it loaded a.pt, the file the drill damaged, and it loaded without a word: a careful script checks a "
        "checkpoint before trusting it (a checksum, or a load that can fail) and falls back to the one before (as "
        "lab/workloads/checkpoint.py does)",
    )
    other = damaged.loaded_file(damage, [load(20.5, "b.pt")])
    assert checked(other, damaged.check_file) == (True, f"it passed over {WORK}/a.pt (damaged) and loaded b.pt")


def test_a_load_path_is_the_cut_file_when_it_is_its_tail():
    assert cut.same_file(f"{WORK}/ckpt/step_15.pt", "./ckpt/step_15.pt")  # "." is no part of a path
    assert not cut.same_file(f"{WORK}/ckpt/step_15.pt", "ckpt/./other/step_15.pt")
