"""`--compare` on a script that is not deterministic (lab.exercises.script.matrix.run_matrix): the
first fault whose result differs from the reference's runs the reference once more; where two
fault-free runs differ too, that row fails saying the script is not deterministic and no fault is
judged by its result. The engine and the runtime are stand-ins here (what the matrix does with
their verdicts is what is tested; the drills' own runs are recorded: tests/fixtures/drills/
script-*); tests/test_script_drills.py runs --compare matrices for real."""

from __future__ import annotations

import copy
from pathlib import Path

from lab.exercises import DrillOptions, kill_worker, rank_exception
from lab.exercises.script import judge
from lab.exercises.script.matrix import Runner, run_matrix
from lab.exercises.script.spec import ScriptSpec
from lab.exercises.seen import Seen
from lab.report import Report
from lab.topology import Topology

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"
RECORDED = {m.NAME: Seen.load(FIXTURES / f"script-{m.NAME}" / "seen.json") for m in (kill_worker, rank_exception)}


class LocalHandle:
    """What the matrix asks of a runtime handle, and nothing else."""

    name, HOST_FILES = "local", True

    def __init__(self, root: Path):
        self.root = root

    def script_workdir(self, label: str) -> Path:
        return self.root / "work" / label

    def script_workdir_note(self) -> str:
        return ""


def matrix_of(
    tmp_path: Path, same_twice: bool, fault_changes_result: bool, written: bool = True
) -> list[tuple[str, str, list[str]]]:
    """[(label, verdict, failed checks)] of a 2-fault --compare matrix whose runs' results compare so."""
    ran: list[str] = []

    def run_drill(run, options, runtime, ray_address, on_report, out) -> Report:
        ran.append(run.NAME)
        if run.fault is None:  # the reference, or the reference again
            report = Report(run.NAME, "local", 4)
            report.check("the fault-free run finished with exit 0", True)
            if run.repeat:
                judge.judge_result(report, {"compared": [same_twice, "3 of 10 numbers differ"], "repeat": True})
            return report
        seen = copy.deepcopy(RECORDED[run.NAME])
        seen.extra["compared"] = [not fault_changes_result, "3 of 10 numbers differ" if written else "wrote none"]
        seen.extra["result_written"] = written
        return judge.judge(seen)

    spec = ScriptSpec(path="/tmp/train.py", compare="result.pt")
    runner = Runner(
        spec, lambda f: Topology(), lambda f: DrillOptions(target_rank=1, at_step=3), lambda: LocalHandle(tmp_path),
        run_drill, tmp_path / "matrix",
    )  # fmt: skip
    matrix = run_matrix(runner, [kill_worker, rank_exception])
    assert ran == [row.label for row in matrix.rows]
    return [(row.label, row.verdict, [c.name for c in row.report.checks if not c.ok]) for row in matrix.rows]


def test_a_script_that_differs_from_itself_fails_once_for_that_and_its_faults_are_judged_without_the_result(tmp_path):
    assert matrix_of(tmp_path, same_twice=False, fault_changes_result=True) == [
        ("reference", "pass", []),
        ("kill-worker", "pass", []),
        ("reference-again", "fail", [judge.REPEATED]),
        ("rank-exception", "pass", []),
    ]
    kept = Seen.load(tmp_path / "matrix" / "kill-worker" / "seen.json")
    assert kept.extra["not_deterministic"] == "two fault-free runs differ too"


def test_a_deterministic_script_whose_fault_changed_the_result_fails_that_fault_only(tmp_path):
    assert matrix_of(tmp_path, same_twice=True, fault_changes_result=True) == [
        ("reference", "pass", []),
        ("kill-worker", "fail", [judge.COMPARED]),
        ("reference-again", "pass", []),
        ("rank-exception", "fail", [judge.COMPARED]),
    ]


def test_results_that_agree_cost_no_second_reference(tmp_path):
    assert [row[0] for row in matrix_of(tmp_path, same_twice=True, fault_changes_result=False)] == [
        "reference",
        "kill-worker",
        "rank-exception",
    ]


def test_the_repeat_says_what_to_do():
    report = Report("reference-again", "local", 4)
    judge.judge_result(report, {"compared": [False, "weights differ in 12 of 40 tensors"], "repeat": True})
    assert report.checks[0].detail == f"weights differ in 12 of 40 tensors: {judge.NOT_DETERMINISTIC}"


def test_a_fault_run_that_wrote_no_result_costs_no_second_reference(tmp_path):
    """A damaged checkpoint crashed it before it wrote one: a second reference would not explain that."""
    assert matrix_of(tmp_path, same_twice=False, fault_changes_result=True, written=False) == [
        ("reference", "pass", []),
        ("kill-worker", "fail", [judge.COMPARED]),
        ("rank-exception", "fail", [judge.COMPARED]),
    ]
