"""A drill module's declarations are checked as the catalogue loads it (lab.exercises.traits):
a real drill's source, changed the way an author slips, is refused in one line that says what to
write; the catalogue itself, and a drill's own constants, pass."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

from lab import exercises
from lab.errors import LabError
from lab.exercises import traits

DRILLS = Path(exercises.__file__).parent
serial = itertools.count()


def drill_from(source: str, tmp_path: Path):
    """A module of that source, imported from its own file (as the catalogue imports a drill)."""
    path = tmp_path / f"drill_{next(serial)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def changed(drill: str, old: str, new: str) -> str:
    source = (DRILLS / f"{drill}.py").read_text()
    assert old in source, f"{drill}.py no longer holds {old!r}: choose another line to change"
    return source.replace(old, new, 1)


def test_every_drill_of_the_catalogue_passes():
    assert len(exercises.drills()) == len(exercises.CATALOG)


def test_the_catalogue_refuses_a_slipped_drill_as_it_loads_it(tmp_path, monkeypatch):
    """Registered with its line in CATALOG, the slipped module stops the catalogue in one line."""
    import sys

    module = drill_from(changed("preempt", 'SCRIPT_RECOVERY = "rerun"', 'SCRIPT_RECOVERY_ = "rerun"'), tmp_path)
    monkeypatch.setitem(sys.modules, "lab.exercises.slipped", module)
    monkeypatch.setattr(exercises, "CATALOG", (*exercises.CATALOG, "slipped"))
    with pytest.raises(LabError, match="defines SCRIPT_RECOVERY_, which nothing reads"):
        exercises.drills()


def test_a_real_drill_copied_whole_loads_into_the_catalogue_beside_the_original(tmp_path, monkeypatch):
    """The copy, its NAME changed, is checked as the catalogue loads it and found there, with
    the original's declarations, beside the original."""
    import sys

    source = changed("corrupt_checkpoint", 'NAME = "corrupt-checkpoint"', 'NAME = "copied-corrupt-checkpoint"')
    module = drill_from(source, tmp_path)
    monkeypatch.setitem(sys.modules, "lab.exercises.copied", module)
    monkeypatch.setattr(exercises, "CATALOG", (*exercises.CATALOG, "copied"))
    loaded = exercises.drills()
    assert loaded["copied-corrupt-checkpoint"] is module
    original = loaded["corrupt-checkpoint"]
    assert (module.INJECTS, module.SCRIPT_RECOVERY) == (original.INJECTS, original.SCRIPT_RECOVERY)


RECOVERY = 'SCRIPT_RECOVERY = "restart"'
SLIPS = {  # id: (drill module, a line of it, the line slipped, what the refusal says)
    "misspelt trait": ("corrupt_checkpoint", RECOVERY, 'SCRIPT_RECOVRY = "restart"',
                       "SCRIPT_RECOVRY, which nothing reads: did you mean the trait SCRIPT_RECOVERY?"),
    "misspelt flag": ("kill_worker", "IN_PROCESS_JUDGED = True", "IN_PROCES_JUDGED = True",
                      "did you mean the trait IN_PROCESS_JUDGED?"),
    "trailing underscore": ("straggler", "NEEDS_PROMETHEUS = True", "NEEDS_PROMETHEUS_ = True",
                            "did you mean the trait NEEDS_PROMETHEUS?"),
    "misspelt hook": ("corrupt_checkpoint", "def break_script(", "def breaks_script(",
                      "did you mean the trait break_script?"),
    "bad recovery": ("corrupt_checkpoint", RECOVERY, 'SCRIPT_RECOVERY = "retry"',
                     "SCRIPT_RECOVERY is 'retry'; it is one of restart, rerun, none"),
    "bad fault": ("corrupt_checkpoint", '"corrupt_checkpoint", "kill_worker")', '"corrupt_checkpoint", "kill_wroker")',
                  "INJECTS names 'kill_wroker', which no Node injects: did you mean kill_worker?"),
    "no judge": ("corrupt_checkpoint", "def judge(", "def verdict(", "lacks judge"),
}  # fmt: skip


@pytest.mark.parametrize("drill, old, new, said", list(SLIPS.values()), ids=list(SLIPS))
def test_a_slip_in_a_drill_is_refused_in_one_line_saying_what_to_write(tmp_path, drill, old, new, said):
    module = drill_from(changed(drill, old, new), tmp_path)
    with pytest.raises(LabError) as refused:
        traits.check(module)
    message = str(refused.value)
    assert said in message and "\n" not in message and module.__file__ and Path(module.__file__).name in message


def test_a_script_side_without_its_recovery_is_refused(tmp_path):
    module = drill_from(changed("corrupt_checkpoint", RECOVERY, ""), tmp_path)
    with pytest.raises(LabError, match="has break_script but not SCRIPT_RECOVERY"):
        traits.check(module)


def test_a_drills_own_constants_pass_even_near_a_traits_name(tmp_path):
    """STEP is close to STEPS, but this drill's code reads it: it is the drill's own constant."""
    source = changed("corrupt_checkpoint", "STEPS, CKPT_EVERY = 60, 10", "STEPS, CKPT_EVERY, STEP = 60, 10, 3")
    source = source.replace("paced_trainer(STEPS, CKPT_EVERY)", "paced_trainer(STEPS, CKPT_EVERY + STEP - 3)")
    traits.check(drill_from(source, tmp_path))
    unread = source.replace("CKPT_EVERY + STEP - 3", "CKPT_EVERY")
    with pytest.raises(LabError, match="STEP, which nothing reads: did you mean the trait STEPS"):
        traits.check(drill_from(unread, tmp_path))


def test_the_worked_drill_of_docs_architecture_passes_and_the_grid_places_it(tmp_path):
    """The example of docs/architecture.md's "Add a drill", with the imports it leaves out: it is
    a whole drill, and the grid runs it wherever a Node kills a worker."""
    from lab.exercises import grid
    from lab.runtimes import runtime_class

    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    example = doc.split("### Add a drill", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    imports = (
        "import signal\nfrom lab.exercises import observe\nfrom lab.exercises.drill import aimed, paced_trainer\n"
        "from lab.exercises.seen import Seen\nfrom lab.report import Report\nfrom lab.topology import Topology\n"
    )
    module = drill_from(imports + example, tmp_path)
    traits.check(module)
    assert module.NAME == "term-worker"
    refused = {r: grid.refusal(module, runtime_class(r), "trainer") for r in grid.RUNTIMES}
    assert refused == {r: "" for r in grid.RUNTIMES}
    no_script = grid.refusal(module, runtime_class("local"), "script")
    assert no_script == "term-worker cannot run on your script: it has no script side"
