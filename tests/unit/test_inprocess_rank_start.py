"""What an in-process rank (lab.inprocess.rank) has loaded when its script starts: the script's
top-level imports and torch._dynamo, done before the script joins its group (a cold rank that
imported torch._dynamo after its join was late to its peers' first collective under load), and
the script's own modules first on the path, as `python SCRIPT` would have them, even when an
installed module has the same name. A real rank process, no store: the script never joins."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

SCRIPT = """\
import sys
print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
import yaml  # this folder's yaml.py, not PyYAML
print(yaml.WHOSE)
"""


def test_a_rank_has_the_scripts_imports_loaded_before_it_runs_and_its_own_modules_first(tmp_path):
    folder, elsewhere = tmp_path / "script", tmp_path / "cwd"  # `-m` puts the cwd on the path: not the script's
    for path in (folder, elsewhere):
        path.mkdir()
    (folder / "train.py").write_text(SCRIPT)
    (folder / "yaml.py").write_text('WHOSE = "the script\'s own"\n')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("LAB_INPROCESS_BEAT_FD", None)
    done = subprocess.run(
        [sys.executable, "-m", "lab.inprocess.rank", str(folder / "train.py")],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["dynamo", "the script's own"]
