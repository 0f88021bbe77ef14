"""The lesson's claims as exercises: each runs for real (torchrun, gloo, netns hosts) and its
verdict is asserted; the three explanations exist for every one."""

import pytest
from conftest import needs_netns, report_of

from lab import lessons
from lab.exercises import all_exercises, kind
from lab.lessons.runner import DEPTHS, explain

LESSONS = {name: m for name, m in all_exercises().items() if kind(m) == "lesson"}


def test_every_lesson_module_is_registered():
    assert len(LESSONS) == len(lessons.MODULES) == 11


@pytest.mark.parametrize("name", sorted(LESSONS))
def test_every_depth_is_explained_and_names_the_command(name):
    module = LESSONS[name]
    assert module.COMMAND == f"lab exercise run {name}"
    assert module.COMMAND in module.__doc__
    texts = {depth: explain(module, depth) for depth in DEPTHS}
    assert len(set(texts.values())) == 3
    for text in texts.values():
        body = text.split("Run it:")[0].strip()
        assert len(body) > 100 and module.COMMAND in text


def test_explain_depth_from_the_cli(lab):
    out = lab("exercise", "explain", "determinism", "--depth", "researcher")
    assert out.returncode == 0 and "lab exercise run determinism" in out.stdout
    assert "floating-point" in out.stdout


def test_a_lesson_refuses_fault_options_in_one_line(lab):
    out = lab("exercise", "run", "hello-ddp", "--target-rank", "1")
    assert out.returncode == 1 and "fault drills" in out.stderr and "Traceback" not in out.stderr


def test_set_device_first_is_skipped_without_gpus_saying_why(lab):
    """This machine has no GPU: the skip path is what runs here (the GPU path needs 2 GPUs)."""
    out = lab("exercise", "run", "set-device-first")
    assert out.returncode == 0, out.stdout + out.stderr
    report = report_of(out)
    assert report["verdict"] == "skip" and "needs at least 2 GPUs" in report["skipped"]


CPU_LESSONS = sorted(set(LESSONS) - {"set-device-first"})


@pytest.mark.slow
@needs_netns
@pytest.mark.parametrize("name", CPU_LESSONS)
def test_lesson_verdict_passes(lab, name):
    out = lab("exercise", "run", name, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = report_of(out)
    assert report["verdict"] == "pass" and report["checks"]
    if name == "determinism":
        final = report["final_checksums"]
        assert final["2x2"] == final["2x2 again"] == final["1x4"] != final["1x2"]
    if name == "same-data-every-rank":
        assert report["plain"]["dups"] == "192" and report["sampler"]["dups"] == "0"
    if name == "bucket-size":
        assert all(v > 0 for v in report["ms_per_step_by_bucket_cap_mb"].values())
