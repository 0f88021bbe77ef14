"""The lab touches only what it made: run dirs it did not create are refused in one line
and left as they were; `lab down` deletes only the lab's own entries, never through a link;
a stale pid file never gets another process signalled; checkpoints never unpickle code."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import stat
import subprocess
import sys

import pytest
import torch
from conftest import REPO
from test_cli_errors import assert_one_line_error

from lab.rundir import MARK_FILE, RunDir, default_path
from lab.workloads import checkpoint

# Each verb with DIR where --run-dir goes (before `run`'s script: what follows it is the script's).
VERBS = [
    ["down", "DIR"],
    ["status", "DIR"],
    ["up", "--hosts", "loopback", "DIR"],
    ["run", "--hosts", "loopback", "DIR", "lab/workloads/ddp_train.py"],
    ["exercise", "run", "kill-worker", "DIR"],
    ["up", "--dry-run", "--hosts", "loopback", "DIR"],
]


def with_run_dir(verb: list[str], directory) -> list[str]:
    i = verb.index("DIR")
    return [*verb[:i], "--run-dir", str(directory), *verb[i + 1 :]]


def lab_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def snapshot(directory) -> dict:
    """Every path under directory (links not followed) with its bytes or link target."""
    found = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                found[path] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                found[path] = ("file", open(path, "rb").read())
    return found


@pytest.fixture
def someones_files(tmp_path):
    """A directory of a user's own files: the kind of thing a mistyped --run-dir names."""
    home = tmp_path / "home"
    (home / "thesis").mkdir(parents=True)
    (home / "thesis" / "chapter1.tex").write_text("irreplaceable")
    (home / "state.json").write_text('{"mine": true}')  # a name the lab also uses
    (home / "checkpoints").mkdir()
    (home / "checkpoints" / "model.pt").write_bytes(b"weights")
    return home


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: "-".join(v[:2]))
def test_a_foreign_run_dir_is_refused_and_left_alone(someones_files, verb):
    before = snapshot(someones_files)
    out = lab_cli(*with_run_dir(verb, someones_files))
    assert_one_line_error(out, str(someones_files), "did not make")
    assert snapshot(someones_files) == before


def test_a_foreign_run_dir_from_the_environment_is_refused(someones_files):
    before = snapshot(someones_files)
    out = lab_cli("down", env={"LAB_RUN_DIR": str(someones_files)})
    assert_one_line_error(out, "did not make")
    assert snapshot(someones_files) == before


@pytest.mark.parametrize("target", ["files", "empty"])
def test_a_symlinked_run_dir_is_refused_and_its_target_untouched(someones_files, tmp_path, target):
    """A planted link (the default path in /tmp is predictable) is never followed, even to an empty dir."""
    if target == "empty":
        someones_files = tmp_path / "empty"
        someones_files.mkdir()
    link = tmp_path / "run"
    link.symlink_to(someones_files)
    before = snapshot(someones_files)
    for verb in (["down"], ["up", "--hosts", "loopback", "--prometheus", "off"]):
        out = lab_cli(*verb, "--run-dir", str(link))
        assert_one_line_error(out, "symlink")
    assert snapshot(someones_files) == before and os.path.islink(link)


def test_a_run_dir_of_another_uid_is_refused(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 65534, 65534)
    out = lab_cli("down", "--run-dir", str(other))
    assert_one_line_error(out, "uid 65534")
    assert other.exists()


def test_a_mark_of_another_uid_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / MARK_FILE).write_text(json.dumps({"uid": os.geteuid() + 1, "lab_id": "abcde"}))
    (run / "nodes").mkdir()
    out = lab_cli("down", "--run-dir", str(run))
    assert_one_line_error(out, "made by uid")
    assert (run / "nodes").exists()


def test_a_new_run_dir_is_made_private_with_a_mark(tmp_path):
    run = RunDir(tmp_path / "deep" / "run")
    lab_id = run.claim()
    info = os.lstat(run.path)
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    mark = json.loads((run.path / MARK_FILE).read_text())
    here = os.lstat(run.path)
    assert mark == {"uid": os.geteuid(), "lab_id": lab_id, "dir": [here.st_dev, here.st_ino]} and len(lab_id) == 5
    assert RunDir(tmp_path / "deep" / "run").claim() == lab_id, "a second claim adopts the lab's own dir"
    assert RunDir(tmp_path / "other").claim() != lab_id or RunDir(tmp_path / "third").claim() != lab_id


def test_the_default_run_dir_is_per_user(monkeypatch, tmp_path):
    monkeypatch.delenv("LAB_RUN_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert default_path().name == f"torchrun-lab-{os.geteuid()}"
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert RunDir().path == xdg / "torchrun-lab"
    os.chown(xdg, 65534, 65534)  # not the caller's: fall back to /tmp
    assert RunDir().path.name == f"torchrun-lab-{os.geteuid()}"


def test_down_deletes_only_what_the_lab_wrote_and_never_through_a_link(tmp_path, someones_files):
    run = RunDir(tmp_path / "run")
    run.write_state({"runtime": "local", "nodes": []})
    (run.path / "nodes" / "node0").mkdir(parents=True)
    (run.path / "nodes" / "node0" / "node.log").write_text("log")
    (run.path / "my-notes.txt").write_text("the user's, inside the run dir")
    (run.path / "checkpoints").symlink_to(someones_files)  # a link where the lab keeps checkpoints
    (run.path / "events").mkdir()
    (run.path / "events" / "elsewhere").symlink_to(someones_files / "thesis")
    before = snapshot(someones_files)
    out = lab_cli("down", "--run-dir", str(run.path))
    assert out.returncode == 0, out.stderr
    assert snapshot(someones_files) == before, "a link's target must never be touched"
    assert sorted(p.name for p in run.path.iterdir()) == [MARK_FILE, "my-notes.txt"]
    os.remove(run.path / "my-notes.txt")
    out = lab_cli("down", "--run-dir", str(run.path))
    assert out.returncode == 0 and not run.path.exists(), "an emptied run dir goes, mark and all"


def test_a_stale_pid_file_never_signals_another_process(tmp_path):
    """The pid a node recorded now belongs to a process the lab did not start (pid reuse)."""
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        run = RunDir(tmp_path / "run")
        run.write_state(
            {
                "runtime": "local",
                "hosts": "loopback",
                "nodes": [{"name": "node0", "index": 0, "address": "127.0.0.1", "netns": None}],
            }
        )
        node_dir = run.path / "nodes" / "node0"
        node_dir.mkdir(parents=True)
        (node_dir / "pid").write_text(str(bystander.pid))
        (node_dir / "workers.json").write_text(json.dumps({"pid": bystander.pid, "workers": {"0": bystander.pid}}))
        out = lab_cli("down", "--run-dir", str(run.path))
        assert out.returncode == 0, out.stderr
        assert bystander.poll() is None, "lab down signalled a process it did not start"
    finally:
        bystander.kill()
        bystander.wait()


class Exploit:
    def __reduce__(self):
        return (os.system, ("touch /tmp/tlab-test-pwned",))


def test_a_checkpoint_with_a_valid_checksum_never_runs_pickled_code(tmp_path):
    payload = io.BytesIO()
    torch.save({"step": 3, "model": Exploit()}, payload, pickle_module=pickle)
    data = payload.getvalue()
    path = checkpoint.path_for(tmp_path, 3)
    path.write_bytes(checkpoint.MAGIC + hashlib.sha256(data).digest() + data)
    try:
        with pytest.raises(checkpoint.CheckpointError, match="not a plain checkpoint"):
            checkpoint.read(path)
        assert not os.path.exists("/tmp/tlab-test-pwned")
    finally:
        if os.path.exists("/tmp/tlab-test-pwned"):
            os.remove("/tmp/tlab-test-pwned")


def test_the_trainers_own_checkpoints_load_with_weights_only(tmp_path):
    from lab.workloads.trainer_state import rng_state, set_rng_state

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    state = {
        "step": 7,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": [rng_state()],
        "sampler": {"epoch": 1, "position": 4},
    }
    checkpoint.save(tmp_path, 7, state)
    loaded = checkpoint.read(checkpoint.path_for(tmp_path, 7))
    assert loaded["step"] == 7 and torch.equal(loaded["model"]["weight"], model.state_dict()["weight"])
    expected = torch.rand(3)
    set_rng_state(loaded["rng"][0])
    assert torch.equal(torch.rand(3), expected), "the RNG state must round-trip"


def test_a_report_written_over_a_planted_link_replaces_the_link(tmp_path, someones_files):
    """--report-dir is the user's to name: a link planted at report.json is replaced, its target untouched."""
    from lab.report import Report

    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "report.json").symlink_to(someones_files / "state.json")
    before = snapshot(someones_files)
    report = Report("kill-worker", "local", 4)
    report.check("something", True)
    report.write(reports, [])
    assert snapshot(someones_files) == before
    assert not (reports / "report.json").is_symlink()
    assert json.loads((reports / "report.json").read_text())["verdict"] == "pass"
