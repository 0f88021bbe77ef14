"""The run dir's mark, attacked as a hostile local user or a careless one would (issue: safe
on a shared machine). Each case: one line, non-zero exit, the planted or copied files and
every victim left exactly as they were. Real files, real uids (65534 is nobody), the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading

import pytest
from conftest import REPO, lab_in_process
from test_cli_errors import assert_one_line_error
from test_ownership import lab_cli, snapshot

from lab.errors import LabError
from lab.rundir import MARK_FILE, RunDir

NOBODY = 65534


@pytest.fixture
def victim(tmp_path):
    """Root-owned files an attacker would like root to delete."""
    target = tmp_path / "victim"
    (target / "dir").mkdir(parents=True)
    (target / "dir" / "precious").write_text("keep me")
    return target


def planted(tmp_path, mark: dict | str, mode: int = 0o700):
    """A run dir of ours whose mark says what the attacker wrote, with something to delete in it."""
    run = tmp_path / "run"
    run.mkdir(mode=mode)
    os.chmod(run, mode)
    (run / MARK_FILE).write_text(mark if isinstance(mark, str) else json.dumps(mark))
    (run / "nodes").mkdir()
    return run


@pytest.mark.parametrize(
    "lab_id", ["x/../../victim/dir", "", "abcd", "ABCDE", "abcdef", "../..", 12345, None], ids=repr
)
def test_a_forged_lab_id_is_refused_and_nothing_is_deleted(tmp_path, capsys, victim, lab_id):
    run = planted(tmp_path, {"uid": os.geteuid(), "lab_id": lab_id})
    before, victim_before = snapshot(run), snapshot(victim)
    for verb in (["down"], ["status"], ["up", "--hosts", "loopback", "--prometheus", "off"]):
        out = lab_in_process(capsys, *verb, "--run-dir", str(run))
        assert_one_line_error(out, str(run), "mark")
    assert snapshot(run) == before and snapshot(victim) == victim_before


@pytest.mark.parametrize("body", ["not json", "[1, 2]", '{"uid": true, "lab_id": "abcde"}', '{"lab_id": "abcde"}'])
def test_a_mark_that_is_not_the_labs_is_refused(tmp_path, body):
    run = planted(tmp_path, body)
    before = snapshot(run)
    assert_one_line_error(lab_cli("down", "--run-dir", str(run)), "mark")
    assert snapshot(run) == before


def test_a_mark_written_by_another_user_is_refused(tmp_path):
    run = planted(tmp_path, {"uid": os.geteuid(), "lab_id": "abcde"})
    os.chown(run / MARK_FILE, NOBODY, NOBODY)
    assert_one_line_error(lab_cli("down", "--run-dir", str(run)), "uid 65534")
    assert (run / "nodes").is_dir()


def test_a_fifo_or_a_huge_mark_is_refused_at_once(tmp_path):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    os.mkfifo(run / MARK_FILE)
    assert_one_line_error(lab_cli("down", "--run-dir", str(run), timeout=20), "not a regular file")
    (run / MARK_FILE).unlink()
    with open(run / MARK_FILE, "wb") as f:
        f.truncate(3 * 1024**3)  # sparse: 3 GB that must never be read
    assert_one_line_error(lab_cli("status", "--run-dir", str(run), timeout=20), "bytes, not a mark")


def test_a_copied_run_dir_cannot_act_on_the_original(tmp_path):
    """`cp -a` keeps the logs and the mark: the copy's mark names another directory."""
    original = RunDir(tmp_path / "run")
    original.claim()
    (original.path / "nodes").mkdir()
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(original.path), str(copy)], check=True)
    before = snapshot(original.path)
    for verb in (["down"], ["up", "--hosts", "loopback", "--prometheus", "off"]):
        assert_one_line_error(lab_cli(*verb, "--run-dir", str(copy)), "mark of another directory")
    assert snapshot(original.path) == before and (copy / "nodes").is_dir()


def test_a_run_dir_others_can_write_is_refused(tmp_path):
    run = RunDir(tmp_path / "run")
    run.claim()
    os.chmod(run.path, 0o777)
    assert_one_line_error(lab_cli("down", "--run-dir", str(run.path)), "open to other users", "chmod 700")


@pytest.mark.parametrize("parent_mode, owner", [(0o777, 0), (0o755, NOBODY), (0o1777, NOBODY)])
def test_a_run_dir_another_user_could_swap_is_refused(tmp_path, parent_mode, owner):
    """`sudo lab up --run-dir ./run` in a folder someone else owns (or anyone may write): they
    could rename the checked run dir away and plant another before the lab removes it."""
    project = tmp_path / "project"
    project.mkdir()
    os.chown(project, owner, owner)
    os.chmod(project, parent_mode)
    out = lab_cli("up", "--hosts", "loopback", "--prometheus", "off", "--run-dir", str(project / "run"))
    assert_one_line_error(out, "can change", "swap")
    assert os.listdir(project) == []


def test_sticky_world_writable_parents_are_fine(tmp_path):
    """/tmp itself: others may write, but only the owner may rename what is ours."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    run = RunDir(shared / "run")
    assert len(run.claim()) == 5


def test_an_existing_directory_the_lab_did_not_make_is_never_adopted(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o755)
    os.chmod(empty, 0o755)
    out = lab_cli("up", "--hosts", "loopback", "--prometheus", "off", "--run-dir", str(empty))
    assert_one_line_error(out, "did not make it", "rmdir")
    assert stat.S_IMODE(os.lstat(empty).st_mode) == 0o755 and os.listdir(empty) == []
    assert lab_cli("down", "--run-dir", str(empty)).returncode == 0  # nothing to stop
    assert empty.is_dir()


def test_an_older_labs_unmarked_run_dir_is_marked_and_its_reports_kept(tmp_path):
    """Before this round a lesson left the default run dir 0755 with reports/ and no mark."""
    old = tmp_path / "run"
    (old / "reports" / "hello-ddp-20261201").mkdir(parents=True)
    (old / "reports" / "hello-ddp-20261201" / "report.json").write_text("{}")
    os.chmod(old, 0o755)
    run = RunDir(old)
    lab_id = run.claim()
    assert run.lab_id == lab_id and stat.S_IMODE(os.lstat(old).st_mode) == 0o700
    assert (old / "reports" / "hello-ddp-20261201" / "report.json").read_text() == "{}"
    run.remove()
    assert (old / "reports" / "hello-ddp-20261201" / "report.json").exists()


def test_an_empty_run_dir_flag_is_refused():
    for verb in (["down"], ["up", "--dry-run"], ["exercise", "run", "hello-ddp"]):
        assert_one_line_error(lab_cli(*verb, "--run-dir", ""), "--run-dir is empty")


def test_commands_starting_at_the_same_moment_share_one_mark(tmp_path):
    """Never a window where the run dir exists without its mark: every claimer gets one id."""
    path = tmp_path / "run"
    ids: list[str] = []
    errors: list[Exception] = []

    def claim() -> None:
        try:
            ids.append(RunDir(path).claim())
        except LabError as e:
            errors.append(e)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(ids)) == 1 and len(ids) == 8
    assert [p for p in os.listdir(tmp_path) if p != "run"] == []  # no staging dir left behind


def test_a_second_job_command_on_a_held_run_dir_is_refused_in_words(tmp_path):
    run = RunDir(tmp_path / "run")
    run.hold()
    out = lab_cli("up", "--hosts", "loopback", "--prometheus", "off", "--run-dir", str(run.path))
    assert_one_line_error(out, "another lab command is using run dir")
    lesson = lab_cli("exercise", "run", "hello-ddp", "--hosts", "loopback", "--run-dir", str(run.path))
    assert_one_line_error(lesson, "another lab command is using run dir")


def test_an_unprivileged_user_cannot_plant_a_mark_in_roots_default_run_dir(tmp_path):
    """The default run dir is 0700: nobody cannot even look inside to plant a mark there."""
    run = RunDir(tmp_path / "run")
    run.claim()
    os.chmod(tmp_path, 0o755)
    planter = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c",
         f"open({str(run.path / 'evil')!r}, 'w')"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert planter.returncode != 0 and "Permission denied" in planter.stderr
    assert not (run.path / "evil").exists()
    shutil.rmtree(run.path)


@pytest.mark.parametrize("planted_at", ["nodes/node0/unslow", "events/forensics"])
def test_a_link_a_container_plants_is_never_followed_by_the_host(tmp_path, victim, planted_at):
    """A node's dir and the events are mounted read-write into its container: the host lab's
    writes there (the straggler's `unslow`, the forensics request) never follow a link."""
    from lab import files
    from lab.exercises import forensics

    run = tmp_path / "run"
    (run / "nodes" / "node0").mkdir(parents=True)
    (run / "events").mkdir()
    target = victim / "dir" / "precious"
    (run / planted_at).symlink_to(victim / "dir" if planted_at.startswith("events") else target)
    before = snapshot(victim)
    if planted_at.startswith("nodes"):
        files.write_beneath(run / "nodes" / "node0", "unslow", "")
        assert (run / planted_at).is_file() and not (run / planted_at).is_symlink()
    else:
        with pytest.raises(LabError, match="never followed"):
            forensics.collect(run / "events", world_size=2, wait_s=0.1)
    assert snapshot(victim) == before
