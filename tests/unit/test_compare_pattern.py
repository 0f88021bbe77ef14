"""`--compare PATTERN`: a result saved in a folder named for the time it was made (pytorch/examples'
FSDP2 saves checkpoints/dtensor_api/<time>/model_state_dict.pt) is the newest plain file the
pattern matches in the run's working dir, never one reached through a link."""

from __future__ import annotations

import os
from pathlib import Path

from lab.exercises.script.script_run import ScriptRun
from lab.exercises.script.spec import ScriptSpec
from lab.topology import Topology

PATTERN = "checkpoints/dtensor_api/*/model_state_dict.pt"


def saved(workdir: Path, folder: str, mtime: float) -> Path:
    path = workdir / "checkpoints" / "dtensor_api" / folder / "model_state_dict.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(folder.encode())
    os.utime(path, (mtime, mtime))
    return path


def test_the_newest_file_the_pattern_matches_is_the_result(tmp_path):
    saved(tmp_path, "2026-12-06_10-00-01", 1000.0)
    newest = saved(tmp_path, "2026-12-06_09-59-59", 2000.0)  # names need not sort as times do
    assert ScriptSpec(path="/t.py", compare=PATTERN).compare_path(tmp_path) == newest


def test_a_match_through_a_linked_folder_or_a_link_is_not_the_result(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "model_state_dict.pt").write_bytes(b"not the job's")
    honest = saved(tmp_path, "a", 1000.0)
    (tmp_path / "checkpoints" / "dtensor_api" / "b").symlink_to(elsewhere)
    (tmp_path / "checkpoints" / "dtensor_api" / "c").mkdir()
    (tmp_path / "checkpoints" / "dtensor_api" / "c" / "model_state_dict.pt").symlink_to(
        elsewhere / "model_state_dict.pt"
    )
    os.utime(elsewhere / "model_state_dict.pt", (3000.0, 3000.0))
    assert ScriptSpec(path="/t.py", compare=PATTERN).compare_path(tmp_path) == honest


def test_no_match_names_the_pattern_so_the_verdict_says_no_result_was_written(tmp_path):
    assert ScriptSpec(path="/t.py", compare=PATTERN).compare_path(tmp_path) == tmp_path / PATTERN


def test_a_plain_name_is_that_file_and_the_kept_copy_of_a_pattern_has_a_plain_name(tmp_path):
    assert ScriptSpec(path="/t.py", compare="result.pt").compare_path(tmp_path) == tmp_path / "result.pt"
    run = ScriptRun(ScriptSpec(path="/t.py", compare="ckpt/*/step-[0-9]*.pt"), None, Topology(), tmp_path, tmp_path)
    assert run.kept_result == tmp_path / "result-step-_0-9]_.pt"
