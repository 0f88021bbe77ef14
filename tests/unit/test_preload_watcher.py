"""A preloaded worker runs a user's script through the lab's watcher (lab.node.preload.run_script_path
with lab.topology.WATCHER) as `python -m lab.node.user_script ... SCRIPT ARGS` would: the script as
`__main__`, its own argv, its folder first on sys.path, its events recorded and its exit status
passed on (one run: it imports torch, seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lab.health.events import read_events

SCRIPT = """
import json, sys
json.dump({"name": __name__, "argv": sys.argv, "path0": sys.path[0]}, open(sys.argv[1], "w"))
print("epoch 3")
sys.exit(int(sys.argv[2]))
"""


def run_watched(tmp_path, status: int) -> subprocess.CompletedProcess:
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    (folder / "train.py").write_text(SCRIPT)
    out, events = tmp_path / "seen.json", tmp_path / "events"
    call = (
        "from lab.node.preload import run_script_path; from lab.topology import WATCHER; "
        f"run_script_path(WATCHER, '--events-dir', {str(events)!r}, {str(folder / 'train.py')!r}, "
        f"{str(out)!r}, '{status}')"
    )
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    return subprocess.run([sys.executable, "-c", call], env=env, capture_output=True, text=True, timeout=120)


def test_the_watcher_runs_the_script_as_python_would_records_it_and_passes_its_status_on(tmp_path):
    done = run_watched(tmp_path, 3)
    assert done.returncode == 3, done.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    script = str(tmp_path / "project" / "train.py")
    argv = [script, str(tmp_path / "seen.json"), "3"]
    assert seen == {"name": "__main__", "argv": argv, "path0": str(tmp_path / "project")}
    kinds = [e["event"] for e in read_events(tmp_path / "events")]
    assert kinds[0] == "start" and "step" in kinds and kinds[-1] == "exit"


CHECKPOINTS = """
import os, sys, torch
import torch.distributed.checkpoint as dcp
where = sys.argv[1]
state = {"w": torch.ones(3)}
torch.save(state, os.path.join(where, "plain.pt"))
with open(os.path.join(where, "plain.pt"), "rb") as f:  # through a file object, as fsspec does
    torch.load(f)
dcp.save(state, checkpoint_id=os.path.join(where, "dcp"))
dcp.load(state, checkpoint_id=os.path.join(where, "dcp"))
"""


def test_the_watcher_records_the_scripts_own_saves_and_loads_whatever_it_passes_them(tmp_path):
    """A path, a file object opened on one, a DCP folder: each save and load of the script's
    own, once; not the reads dcp.load makes inside itself (one torch run: seconds)."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_text(CHECKPOINTS)
    events = tmp_path / "events"
    call = (
        "from lab.node.preload import run_script_path; from lab.topology import WATCHER; "
        f"run_script_path(WATCHER, '--events-dir', {str(events)!r}, {str(folder / 'train.py')!r}, {str(tmp_path)!r})"
    )
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    done = subprocess.run([sys.executable, "-c", call], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = [(e["event"], e["how"], e["path"]) for e in read_events(events) if e["event"] in ("saved", "loaded")]
    assert seen == [
        ("saved", "torch.save", str(tmp_path / "plain.pt")),
        ("loaded", "torch.load", str(tmp_path / "plain.pt")),
        ("saved", "dcp.save", str(tmp_path / "dcp")),
        ("loaded", "dcp.load", str(tmp_path / "dcp")),
    ]
