"""Fault drills on unmodified user scripts (tests/user_scripts, written in the styles people use),
on netns hosts: verdicts say what was lost and why, every run starts from a clean slate, and the
matrix page renders in a real headless browser (Debian's Chromium).

The verdicts on other scripts (one that never loads its checkpoint, a silent one, a fault that
never fired, a straggler) are drawn in tests/unit/test_script_judge.py from recorded runs."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import ARTIFACTS, REPO, chromium, needs_chromium, needs_netns, report_of

from lab.exercises import samples
from lab.health.events import read_events

pytestmark = [pytest.mark.slow, needs_netns]
SCRIPTS = REPO / "tests" / "user_scripts"


def script(name: str) -> str:
    return str(SCRIPTS / name)


def reports(directory) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in directory.glob("*/report.json")}


@needs_chromium
def test_matrix_on_the_snapshot_tutorial_script(lab, tmp_path):
    """Reference, kill-worker, preempt and corrupt-checkpoint on the snapshot-every-epoch pattern:
    the first two faults resume bit-identical; the damaged snapshot crashes it (it never checks
    one), so the matrix fails and says where."""
    out_dir = tmp_path / "matrix"
    out = lab(
        "exercise", "matrix", "--script", script("snapshot_every_epoch.py"),
        "--faults", "kill-worker,preempt,corrupt-checkpoint", "--ckpt-dir", ".", "--compare", "result.pt",
        "--report-dir", str(out_dir), "--", "--epochs", "8", "--epoch-time", "1.0",
        timeout=1200,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    matrix = json.loads((out_dir / "matrix.json").read_text())
    rows = {row["fault"]: row for row in matrix["rows"]}
    assert list(rows) == ["reference", "kill-worker", "preempt", "corrupt-checkpoint"], matrix
    assert matrix["verdict"] == "fail"
    for fault in ("kill-worker", "preempt"):
        assert rows[fault]["verdict"] == "pass", rows[fault]
        assert rows[fault]["work_redone"]["unit"] == "epoch" and rows[fault]["progress_source"] == "output"
        assert rows[fault]["compared"].startswith("bitwise equal"), rows[fault]
    assert rows["kill-worker"]["restarts"] == 1 and rows["kill-worker"]["recovery_s"] > 0
    broken = rows["corrupt-checkpoint"]
    assert broken["verdict"] == "fail"
    load_line = next(
        i
        for i, text in enumerate((SCRIPTS / "snapshot_every_epoch.py").read_text().splitlines(), 1)
        if "torch.load(" in text
    )
    assert f"snapshot_every_epoch.py:{load_line})" in broken["finding"], broken["finding"]
    # A clean slate each: no run found the previous run's relative snapshot.pt at its start.
    assert {r["progress"]["first"] for r in reports(out_dir).values()} == {0}
    assert "| corrupt-checkpoint | fail |" in (out_dir / "matrix.md").read_text()

    dom = chromium("--dump-dom", (out_dir / "matrix.html").as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = dom.stdout[dom.stdout.index("<tbody>") : dom.stdout.index("</tbody>")]
    assert re.findall(r'<tr class="(\w+)"><td>([\w-]+)</td>', body) == [
        ("pass", "reference"), ("pass", "kill-worker"), ("pass", "preempt"), ("fail", "corrupt-checkpoint")
    ]  # fmt: skip
    assert body.count('src="data:image/png;base64,') == 4  # every timeline inline: the page stands alone
    shot = chromium(f"--screenshot={ARTIFACTS / 'matrix.png'}", (out_dir / "matrix.html").as_uri())
    assert shot.returncode == 0 and (ARTIFACTS / "matrix.png").stat().st_size > 10_000


def test_a_dcp_script_on_three_nodes_resumes_and_matches_the_reference(lab):
    """torch.distributed.checkpoint, steps from the lab's helper, 3 x 1, the last rank killed."""
    out = lab(
        "exercise", "run", "kill-worker", "--script", script("dcp_checkpoint.py"), "--nodes", "3",
        "--nproc-per-node", "1", "--target-rank", "2", "--at-step", "12", "--compare", "result.txt",
        "--", "--steps", "30",
        timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and report["progress"]["source"] == "helper"
    assert report["faults"][0]["rank"] == 2 and report["world_size"] == 3
    assert re.fullmatch(r"ckpt/step(5|10|15)", report["loaded_after_fault"][0]), report["loaded_after_fault"]
    redone = report["work_redone"]
    assert redone["unit"] == "step" and 0 <= redone["count"] <= 5, redone  # at most one interval of 5
    assert report["compared"].startswith("bitwise equal")


def test_a_checkpoint_left_in_an_absolute_dir_is_reported_not_judged_as_a_recovery(lab, tmp_path):
    shared = tmp_path / "shared-ckpt"
    shared.mkdir()
    model = torch.nn.Linear(8, 1)
    torch.save({"model": model.state_dict(), "epoch": 5}, shared / "snapshot.pt")
    out = lab(
        "exercise", "run", "kill-worker", "--script", script("snapshot_every_epoch.py"), "--ckpt-dir", str(shared),
        "--", "--epochs", "12", "--snapshot", str(shared / "snapshot.pt"),
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    stale = next(c for c in report["checks"] if c["name"] == "it started from a clean slate")
    assert not stale["ok"] and "already held snapshot.pt" in stale["detail"]


def test_a_script_that_replays_its_epoch_on_resume_fails_the_drill_with_the_count(lab, tmp_path):
    """A script that restores its step but starts the epoch again from its first batch trains on
    those batches twice: the kill-worker drill counts the repeats from the samples it reports
    (lab.progress.step(n, samples=..., epoch=...)) and fails; resumed right, nothing is repeated."""
    out = lab(
        "exercise", "run", "kill-worker", "--script", script("mid_epoch_resume.py"), "--ckpt-dir", ".",
        "--at-step", "22", "--", "--steps", "40", "--resume-sampler", "replay", timeout=600,
    )  # fmt: skip
    report = report_of(out)
    failed = {c["name"]: c["detail"] for c in report["checks"] if not c["ok"]}
    assert out.returncode == 1 and list(failed) == ["every sample once per epoch"], out.stdout[-3000:]
    assert report["samples"]["repeated"] > 0 and "first repeat: sample" in failed["every sample once per epoch"]

    events = tmp_path / "events"  # the same script resumed right, under torchrun alone
    for steps in (22, 40):
        run = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
             f"--log-dir={tmp_path / f'torchrun-logs-{steps}'}", script("mid_epoch_resume.py"),
             "--steps", str(steps), "--step-time", "0"],
            cwd=tmp_path, env={**os.environ, "LAB_EVENTS_DIR": str(events), "PYTHONPATH": str(REPO)},
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
    right = samples.summary(list(read_events(events)))
    assert right is not None and (right["repeated"], right["skipped"]) == (0, 0)


def test_a_dcp_script_that_trusts_a_folder_of_two_steps_fails_the_drill_saying_what_a_careful_one_does(lab):
    """tests/user_scripts/dcp_checkpoint.py passes over a folder without .metadata but trusts one
    that has it: with step10's largest shard replaced by step5's (--damage mixed-steps), it loads
    ckpt/step10 and resumes from a state no step had."""
    out = lab(
        "exercise", "run", "corrupt-checkpoint", "--script", script("dcp_checkpoint.py"), "--ckpt-dir", "ckpt",
        "--damage", "mixed-steps", "--at-step", "12", "--", "--steps", "30",
        timeout=900,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["damaged_dcp_step"] == {
        "damage": "mixed-steps", "step": "step10", "loaded": "ckpt/step10", "took_damaged": True,
    }  # fmt: skip
    failed = [c for c in report["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["it did not resume from the step the drill damaged"], failed
    assert "writes a manifest (each file's size and sha256)" in failed[0]["detail"]


def test_a_node_lost_for_good_from_an_elastic_job_leaves_the_survivors_to_finish_your_script(lab):
    """kill-node --elastic on the tutorial script: torchrun's --nnodes 1:2 closes its next round
    with node0 alone, the script resumes from its snapshot at world size 2 and finishes; node1,
    dead for good, is neither waited for nor stopped by the drill, and not asked to end well.
    (--rejoin and the verdicts' failing sides: tests/unit/test_script_resize.py, on recorded runs.)"""
    out = lab(
        "exercise", "run", "kill-node", "--elastic", "--script", script("snapshot_every_epoch.py"),
        "--", "--epochs", "12",
        timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and report["world_sizes_after"] == [2], report["checks"]
    assert report["faults"][0]["node"] == "node1" and report["faults"][0]["lost_for_good"] is True
    progress = report["progress"]  # from its snapshot: the epoch after the last one saved, or the one in flight
    assert progress["reached"] <= progress["resumed_at"] <= progress["reached"] + 1, progress
    assert report["loaded_after_fault"][0] == "snapshot.pt"
