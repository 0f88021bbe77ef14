"""kill-in-save for real on netns hosts: a rank's save paused midway by the in-rank fault, the rank
SIGKILLed inside the pause, the job restarted by torchrun. The verdicts on recorded runs of the same
drill, each changed in one thing, are in tests/unit/test_kill_in_save.py."""

import re

import pytest
from conftest import REPO, needs_netns, report_of

pytestmark = [pytest.mark.slow, needs_netns]

MARKER_SCRIPT = str(REPO / "tests" / "user_scripts" / "latest_marker.py")


def test_the_trainer_killed_in_its_save_loads_the_newest_whole_checkpoint(lab):
    """At step 25 rank 0 is told; its next save, step 30's, stops with half the file written
    under its temporary name. The restart loads step 20, bit-identical at the end."""
    out = lab("exercise", "run", "kill-in-save", timeout=400)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["verdict"] == "pass", report["checks"]
    assert report["cut"]["step"] == 30 and re.search(r"/\.step_00000030\.ckpt\.\d+\.tmp$", report["cut"]["path"])
    assert report["lost_steps"] == 10 and report["recovery_style"]["style"] == "restart"
    assert f"rank 0's save of {report['cut']['path']} paused midway" in out.stdout


@pytest.mark.parametrize(
    ("flags", "verdict", "loaded"),
    [
        ((), "fail", None),  # the marker named step 15 before its file was whole: the half is loaded
        (("--marker-last",), "pass", ["ckpt/step_10.pt"]),  # the marker still names step 10
    ],
)
def test_a_latest_marker_moved_before_its_save_loads_the_half_and_one_moved_after_does_not(lab, flags, verdict, loaded):
    """tests/user_scripts/latest_marker.py, rank 0 saving every 5 steps, told at step 12: cut in
    step 15's torch.save."""
    out = lab(
        "exercise", "run", "kill-in-save", "--script", MARKER_SCRIPT, "--at-step", "12", "--", "--steps", "40", *flags,
        timeout=400,
    )  # fmt: skip
    assert out.returncode == (0 if verdict == "pass" else 1), out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    cut = report["cut_save"]
    assert report["verdict"] == verdict and cut["path"].endswith("/ckpt/step_15.pt") and cut["how"] == "torch.save"
    assert cut["took_cut"] is (verdict == "fail")
    if loaded is None:
        assert cut["loaded"] == "ckpt/step_15.pt" and "PytorchStreamReader" in cut["error"]
        assert report["explanation"].startswith(
            "it did not load the save the kill cut short: no. it loaded ckpt/step_15.pt"
        )
    else:
        assert report["loaded_after_fault"][:1] == loaded
