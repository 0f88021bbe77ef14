"""The lesson's claims as exercises: the three explanations exist for every one, and the CLI
refuses what lessons do not take. Each lesson runs for real (torchrun, gloo, netns hosts), its
verdict asserted, in tests/test_docs_path.py, in the README's order."""

import pytest
from conftest import report_of

from lab import lessons
from lab.exercises import all_exercises, kind
from lab.lessons.runner import DEPTHS, explain

LESSONS = {name: m for name, m in all_exercises().items() if kind(m) == "lesson"}


def test_every_lesson_module_is_registered():
    assert len(LESSONS) == len(lessons.MODULES) == 12


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


# Every lesson's verdict is asserted where the README's learning path runs them, in its order,
# on the default run dir: tests/test_docs_path.py::test_the_readme_in_order.
