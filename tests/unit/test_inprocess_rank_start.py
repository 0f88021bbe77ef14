"""What an in-process rank (lab.node.inprocess.rank) has loaded when its script starts: the script's
top-level imports and torch._dynamo, done before the script joins its group (a cold rank that
imported torch._dynamo after its join was late to its peers' first collective under load), and
the script's own modules first on the path, as `python SCRIPT` would have them, even when an
installed module has the same name; and a spare, which imports before it knows its rank, leaves
the user's own modules for the script. Real rank processes; the script never joins a group."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

from conftest import REPO

from lab.nodeenv import NodeEnv

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
        [sys.executable, "-m", "lab.node.inprocess.rank", str(folder / "train.py")],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["dynamo", "the script's own"]


def test_a_spare_leaves_the_scripts_own_modules_until_it_knows_its_rank(tmp_path):
    """A module of the user's that reads RANK as it loads is loaded by the script, after the
    spare is told its rank: imported in the spare's head start, it read no rank, and the script
    then ran with that. Installed modules are still imported ahead (the optimizer's dynamo)."""
    import torch.distributed as dist

    from lab.bench import free_port

    (tmp_path / "settings.py").write_text('import os\nRANK_AT_IMPORT = os.environ.get("RANK", "none")\n')
    (tmp_path / "train.py").write_text(
        'import sys\nimport settings\nprint(settings.RANK_AT_IMPORT, "torch._dynamo" in sys.modules)\n'
    )
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=30))
    store.set("spare-node0", "3,1,0,fresh")  # its assignment: rank 3, local rank 1, generation 0, a fresh start
    env = {**os.environ, "PYTHONPATH": str(REPO), **NodeEnv(inprocess_store=f"127.0.0.1:{port}").render()}
    for name in ("RANK", "LOCAL_RANK", "LAB_INPROCESS_BEAT_FD"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "lab.node.inprocess.rank", "--spare", "spare-node0", str(tmp_path / "train.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "True"]


def test_installed_tells_pythons_and_the_packages_modules_from_the_users(tmp_path, monkeypatch):
    """What a rank imports ahead: the standard library and site-packages, found without running
    them; not a module of the script's folder, even one named as an installed one."""
    from lab.node.inprocess import rank

    for own in ("settings", "this"):  # "this": of the standard library, and imported by no test
        (tmp_path / f"{own}.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))  # as the rank puts the script's folder: first
    assert rank.installed("torch.nn") and rank.installed("json") and rank.installed("sys")
    assert not rank.installed("settings") and not rank.installed("this") and not rank.installed("no_such_module")
    assert "settings" not in sys.modules  # found, not run
