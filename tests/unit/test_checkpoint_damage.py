"""corrupt-checkpoint damages the newest checkpoint while it holds the target worker stopped,
and that worker's peers wait in a collective meanwhile, only as long as the job's process-group
timeout (10 s in tests/user_scripts/snapshot_every_epoch.py). So the damage must be quick on a
loaded machine, whatever the node: it must not import torch. It did once, in a node agent that
had not imported torch yet: 12.5 s on a loaded CI machine, and the peers timed out before the
kill (that run is tests/fixtures/drills/script-corrupt-held-long, judged in test_script_judge).

Each node kind's damage runs here as it runs there, in a fresh interpreter; `python -X importtime`
lists every module that interpreter imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lab.runtimes.k8s_node import PodNode
from lab.runtimes.kubectl import Kubectl

NODE_WITH_FILES = """
import sys
from lab.exercises import node_agent  # what the drill's Ray actor has loaded
from lab.runtimes import local_node, docker_node  # the nodes it attaches to (NodeFiles: their damage)
print(local_node.LocalNode.corrupt_checkpoint(None, sys.argv[1]))
"""


def a_script_checkpoint(folder: Path) -> Path:
    """A script's snapshot (any name; it is the newest file), beside an older one."""
    folder.mkdir()
    (folder / "old.pt").write_bytes(b"o" * 100)
    newest = folder / "snapshot.pt"
    newest.write_bytes(bytes(range(256)) * 4)
    return newest


def imported(stderr: str) -> set[str]:
    """The modules `python -X importtime` says it imported (its table's last column)."""
    rows = [line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")]
    return set(rows[1:])


def damage(argv: list[str], cwd: Path) -> tuple[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip(), imported(done.stderr)


def test_a_node_whose_files_this_machine_reads_damages_a_checkpoint_without_torch(tmp_path):
    """Local, docker and a Ray machine's own node: the node agent's call (lab.runtimes.base.NodeFiles)."""
    newest = a_script_checkpoint(tmp_path / "ckpt")
    said, modules = damage(["-c", NODE_WITH_FILES, str(tmp_path / "ckpt")], tmp_path)
    assert said == str(newest) and newest.stat().st_size == 512 and (tmp_path / "ckpt" / "old.pt").stat().st_size == 100
    assert "torch" not in modules and "lab.exercises.node_agent" in modules


def test_a_pod_damages_a_checkpoint_without_torch(tmp_path):
    """A pod runs the node's code in `python -c` through `kubectl exec`; here that same code runs
    in this machine's interpreter (the pod's image holds the same lab), not in a pod."""
    newest = a_script_checkpoint(tmp_path / "ckpt")
    ran: list[tuple[str, set[str]]] = []

    class HereNotInAPod(PodNode):
        def _in_pod(self, code: str) -> str:
            ran.append(damage(["-c", code], tmp_path))
            return ran[-1][0]

    node = HereNotInAPod(Kubectl(context=None, namespace="default"), 0, tmp_path)
    assert node.corrupt_checkpoint(str(tmp_path / "ckpt")) == str(newest)
    assert newest.stat().st_size == 512
    assert "torch" not in ran[0][1] and "lab.workloads.checkpoint_files" in ran[0][1]


def test_the_trainers_newest_step_file_is_the_one_damaged_not_the_newest_written(tmp_path):
    """The lab's trainer names its checkpoints by step: step 20 is damaged even when step 10
    was written later (a resume that saved again)."""
    from lab.workloads import checkpoint_files

    (tmp_path / "step_00000020.ckpt").write_bytes(b"2" * 64)
    (tmp_path / "step_00000010.ckpt").write_bytes(b"1" * 64)
    assert checkpoint_files.corrupt_newest(tmp_path) == tmp_path / "step_00000020.ckpt"
    assert (tmp_path / "step_00000020.ckpt").read_bytes() == b"2" * 32
    assert (tmp_path / "step_00000010.ckpt").read_bytes() == b"1" * 64
