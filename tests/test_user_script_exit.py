"""The exit record lab.node.user_script writes for a script a wrapper ended with a status, from a
real process (one rank, no torchrun): Hydra's app, whose exception Hydra catches, prints and turns
into `sys.exit(1)`, and a script that prints its own words and exits without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def exit_record(tmp_path: Path, source: str) -> dict:
    script = tmp_path / "train.py"
    script.write_text(source)
    argv = [sys.executable, "-m", "lab.node.user_script", "--events-dir", str(tmp_path / "events"), str(script)]
    env = {"PATH": "/usr/bin:/bin", "RANK": "1", "LOCAL_RANK": "1", "PYTHONPATH": str(Path(__file__).parents[1])}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "events" / "rank1.jsonl").read_text().splitlines()]
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
