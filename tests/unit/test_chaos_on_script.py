"""A campaign on a user's script: the fault-free reference gets as long as the struck job took (and
--deadline more), and a reference that does not end leaves the ledger saying so, never lost.

The drill here runs no job: it writes the result file the script would have written and records
how long it was asked to wait; the real reference runs in tests/test_chaos.py's script campaign."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.chaos.on_script import ScriptTarget
from lab.errors import LabError
from lab.exercises.script.spec import ScriptSpec


class ReferenceDrill:
    def __init__(self, reference_dir: Path, takes_s: float) -> None:
        self.reference_dir, self.takes_s = reference_dir, takes_s
        self.topology = object()
        self.waited: list[float] = []

    def progress(self, text: str) -> None:
        pass

    def rerun(self, args, fresh: str, topology) -> None:
        (self.reference_dir / "result.txt").write_text("1.0 2.0\n")

    def wait_job(self, timeout_s: float) -> dict[str, int]:
        self.waited.append(timeout_s)
        if self.takes_s > timeout_s:
            raise LabError(f"timed out after {timeout_s:.0f}s waiting for the job to end")
        return {"node0": 0, "node1": 0}


def target(tmp_path: Path) -> ScriptTarget:
    job, reference = tmp_path / "job", tmp_path / "reference"
    job.mkdir()
    reference.mkdir()
    (job / "result.txt").write_text("1.0 2.0\n")
    spec = ScriptSpec(path="/x/train.py", compare="result.txt", deadline_s=180.0)
    return ScriptTarget(spec, job, reference, tmp_path / "kept")


class Topology:
    def replace(self, **changes):
        return self


@pytest.mark.parametrize("job_s", [60.0, 1500.0])
def test_the_reference_gets_as_long_as_the_struck_job_took_and_the_deadline_more(tmp_path, job_s):
    chosen = target(tmp_path)
    drill = ReferenceDrill(tmp_path / "reference", takes_s=job_s)
    drill.topology = Topology()
    result = chosen.final_result(drill, job_s=job_s)
    assert drill.waited == [job_s + 180.0]
    assert result["identical"] is True and result["compared"] == "result.txt"


def test_a_reference_that_does_not_end_is_said_in_the_ledger_not_raised(tmp_path):
    chosen = target(tmp_path)
    drill = ReferenceDrill(tmp_path / "reference", takes_s=10_000.0)
    drill.topology = Topology()
    result = chosen.final_result(drill, job_s=1000.0)
    assert result["identical"] is False and result["reference_ended"] is False
    assert result["why"].startswith("not compared: the uninterrupted reference did not end (timed out after 1180s")
