"""The records lab.node.user_script writes, from real processes (a rank each, no torchrun): the exit
of a script a wrapper ended with a status (Hydra's app, whose exception Hydra catches, prints and
turns into `sys.exit(1)`; a script that exits in its own words), and the saves of ranks that write
one checkpoint file (lab.exercises.script.writers reads them), and the loads that raised (kill-in-save's
judge, lab.exercises.script.cut, reads them as what the script took after the kill)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lab.exercises.script import writers

HYDRA_APP = """
import sys
import hydra

@hydra.main(version_base=None)
def main(cfg):
    raise KeyError("data.path")

if __name__ == "__main__":
    sys.argv += ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout"]
    main()
"""
OWN_WORDS = """
import sys
print("cannot read /data/shard-1: permission denied", file=sys.stderr)
sys.exit(4)
"""


SAVES_IN_PLACE = """
import torch
torch.save({"weights": [1.0]}, "checkpoint.pth.tar")
"""
SAVES_THROUGH_A_RENAME = """
import torch
torch.save({"weights": [1.0]}, f"checkpoint.pt.{os.environ['RANK']}.tmp")
os.replace(f"checkpoint.pt.{os.environ['RANK']}.tmp", "checkpoint.pt")
"""
LOADS_A_HALF = """
import torch
torch.save({"weights": torch.zeros(100)}, "snapshot.pt")
data = open("snapshot.pt", "rb").read()
open("snapshot.pt", "wb").write(data[: len(data) // 2])
try:
    torch.load("snapshot.pt", weights_only=True)
except RuntimeError:
    pass
"""


def run_as_rank(tmp_path: Path, source: str, rank: int = 1) -> tuple[int, list[dict]]:
    """(exit status, the rank's records) of the script run as that rank in tmp_path."""
    script = tmp_path / "train.py"
    script.write_text(source)
    argv = [sys.executable, "-m", "lab.node.user_script", "--events-dir", str(tmp_path / "events"), str(script)]
    env = {"PATH": "/usr/bin:/bin", "RANK": str(rank), "LOCAL_RANK": str(rank)}
    env["PYTHONPATH"] = str(Path(__file__).parents[1])
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    records = [json.loads(line) for line in (tmp_path / "events" / f"rank{rank}.jsonl").read_text().splitlines()]
    return done.returncode, records


def exit_record(tmp_path: Path, source: str) -> dict:
    code, records = run_as_rank(tmp_path, source)
    assert code != 0, records
    return next(r for r in records if r["event"] == "exit")


def test_a_hydra_app_that_raised_is_recorded_with_its_exception_not_hydras_trailer(tmp_path):
    record = exit_record(tmp_path, HYDRA_APP)
    assert (record["reason"], record["error"], record["code"]) == ("exception", "KeyError: 'data.path'", 1)
    assert record["where"] == f"{tmp_path / 'train.py'}:7"
    assert not list(tmp_path.glob("outputs")), "the app was told to write nothing where it ran"


def test_a_script_that_exits_in_its_own_words_is_recorded_as_an_exit_status_with_them(tmp_path):
    record = exit_record(tmp_path, OWN_WORDS)
    assert (record["reason"], record["code"]) == ("exit_status", 4)
    assert record["stderr"][-1] == "cannot read /data/shard-1: permission denied"


def test_two_ranks_saving_one_file_in_place_are_flagged_and_a_save_through_a_rename_is_not(tmp_path):
    for source, flagged in ((SAVES_IN_PLACE, [{"path": "checkpoint.pth.tar", "ranks": [0, 1]}]),
                            (SAVES_THROUGH_A_RENAME, [])):  # fmt: skip
        (tmp_path / "events").mkdir(exist_ok=True)
        events = [e for rank in (0, 1) for e in run_as_rank(tmp_path, source, rank)[1]]
        assert writers.shared_writes(events) == flagged, events
        for leftover in (tmp_path / "events").iterdir():
            leftover.unlink()


def test_a_load_that_raised_is_recorded_with_its_path_and_error_and_not_as_loaded(tmp_path):
    code, records = run_as_rank(tmp_path, LOADS_A_HALF, rank=0)
    assert code == 0, records
    (failed,) = [r for r in records if r["event"] == "load_failed"]
    assert (failed["path"], failed["how"]) == ("snapshot.pt", "torch.load")
    assert failed["error"].startswith("RuntimeError: PytorchStreamReader failed reading zip archive")
    assert not [r for r in records if r["event"] == "loaded"]
