"""`lab exercise matrix`: the user's script, once without a fault and once per fault, one verdict each.

Every run is a drill of its own (lab up, the script in a fresh working dir, lab down), so no
run sees another's checkpoints. The fault-free reference runs first: its result file is what
each fault's is compared with, and a script that fails without any fault stops the matrix.
Writes matrix.json, matrix.md and a self-contained matrix.html (lab.exercises.script.page).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from lab import files, job_text
from lab.errors import LabError
from lab.exercises import DrillOptions
from lab.exercises.script import judge, page
from lab.exercises.script.script_run import REFERENCE, REPEAT, ScriptRun
from lab.exercises.script.spec import ScriptSpec
from lab.report import Report
from lab.runtimes.base import Runtime
from lab.topology import Topology


@dataclass
class Row:
    label: str
    report: Report | None = None
    error: str = ""  # the run could not happen (a fault this runtime cannot inject, ...)
    directory: Path | None = None
    not_run: str = ""  # why it never ran (the reference failed: nothing to judge it against)

    @property
    def verdict(self) -> str:
        return "error" if self.error else self.report.verdict if self.report else "not run"

    def to_json(self) -> dict[str, Any]:
        facts = self.report.facts if self.report else {}
        return {
            "fault": self.label,
            "verdict": self.verdict,
            "finding": self.error or self.not_run or facts.get("finding", ""),
            "restarts": facts.get("restarts"),
            "work_redone": facts.get("work_redone"),
            "recovery_s": (facts.get("recovery") or {}).get("total"),
            "progress_source": (facts.get("progress") or {}).get("source"),
            "compared": facts.get("compared"),
            "checks": [c.__dict__ for c in self.report.checks] if self.report else [],
            "report": str(self.directory / "report.json") if self.report and self.directory else None,
            "timeline": str(self.directory / "timeline.png") if self.directory else None,
        }


@dataclass
class Matrix:
    spec: ScriptSpec
    runtime: str
    topology: Topology
    rows: list[Row] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.verdict == "pass" for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "script": self.spec.path,
            "script_args": list(self.spec.args),
            "runtime": self.runtime,
            "nodes": self.topology.nodes,
            "nproc_per_node": self.topology.nproc_per_node,
            "verdict": "pass" if self.passed else "fail",
            "rows": [r.to_json() for r in self.rows],
        }

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        record = self.to_json()
        files.write_text(directory / "matrix.json", json.dumps(record, indent=2, default=str) + "\n")
        files.write_text(directory / "matrix.md", markdown(record))
        files.write_text(directory / "matrix.html", page.html(record))


def markdown(record: dict[str, Any]) -> str:
    record = job_text.cleaned(record)
    lines = [
        f"# Fault matrix: {Path(record['script']).name} ({record['nodes']} x {record['nproc_per_node']}, "
        f"{record['runtime']}): {record['verdict'].upper()}",
        "",
        "| fault | verdict | restarts | work redone | recovery s | progress from | finding |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in record["rows"]:
        cells = [row["fault"], row["verdict"], *page.cell_texts(row), row["finding"]]
        lines.append("| " + " | ".join(job_text.markdown_cell(str(c)) for c in cells) + " |")
    return "\n".join(lines) + "\n"


@dataclass
class Runner:
    """How the matrix makes one run: each fault's topology and options, a fresh runtime handle
    (each run brings its own lab up and down), and the engine that runs a drill."""

    spec: ScriptSpec
    topology_for: Callable[[ModuleType | None], Topology]
    options_for: Callable[[ModuleType | None], DrillOptions]
    make_runtime: Callable[[], Runtime]
    run_drill: Callable[..., Report]
    out_dir: Path
    ray_address: str | None = None
    out: TextIO = sys.stdout

    def run(self, fault: ModuleType | None, reference: Path | None, repeat: bool = False) -> tuple[Row, ScriptRun]:
        label = REPEAT if repeat else fault.NAME if fault else REFERENCE
        runtime = self.make_runtime()
        run = ScriptRun(
            spec=self.spec,
            fault=fault,
            base_topology=self.topology_for(fault),
            workdir=Path(self.spec.workdir) if self.spec.workdir else runtime.script_workdir(label),
            keep_dir=self.out_dir / label,
            reference_result=reference,
            host_files=runtime.HOST_FILES,
            workdir_note="" if self.spec.workdir else runtime.script_workdir_note(),
            repeat=repeat,
        )
        row = Row(label, directory=self.out_dir / label)
        try:
            row.report = self.run_drill(
                run,
                self.options_for(fault),
                runtime,
                ray_address=self.ray_address,
                on_report=lambda report, drill, keep=run.keep_dir: report.write(keep, drill.events()),
                out=self.out,
            )
        except LabError as e:
            row.error = str(e)
        return row, run


def run_matrix(
    runner: Runner, faults: list[ModuleType], on_row: Callable[[Row], None] = lambda row: None, reference: bool = True
) -> Matrix:
    """The reference (unless reference=False: nothing to compare), then each fault, one drill
    each; the matrix files are rewritten after every row. With --compare, the first fault whose
    result differs from the reference's runs the reference once more: where the two fault-free
    runs differ too, the script is not deterministic, and no fault is judged by its result."""
    matrix = Matrix(runner.spec, runner.make_runtime().name, runner.topology_for(None))

    def add(row: Row) -> None:
        matrix.rows.append(row)
        matrix.write(runner.out_dir)
        on_row(row)

    reference_result, differs = None, None
    if reference:
        row, run = runner.run(None, None)
        add(row)
        if row.verdict != "pass":  # nothing to judge a fault against: the script fails on its own
            _not_run(matrix, faults, f"not run: the fault-free reference did not pass ({row.verdict})", runner.out_dir)
            return matrix
        reference_result = run.kept_result
    for fault in faults:
        row, _ = runner.run(fault, reference_result)
        add(row)
        if differs is None and judge.result_differs(row.report):
            again, _ = runner.run(None, reference_result, repeat=True)
            add(again)
            differs = judge.result_differs(again.report)
        if differs:
            _not_judged_by_result(matrix, runner.out_dir)
    return matrix


def _not_judged_by_result(matrix: Matrix, out_dir: Path) -> None:
    """Each fault's verdict drawn again without its result's comparison: two fault-free runs of
    the script differ too, so a difference says nothing about the fault."""
    for row in matrix.rows:
        if row.label in (REFERENCE, REPEAT) or row.report is None or row.report.evidence is None:
            continue
        seen = row.report.evidence
        seen.extra["not_deterministic"] = "two fault-free runs differ too"
        row.report = judge.judge(seen)
        if row.directory is not None:
            row.report.write(row.directory, [])
    matrix.write(out_dir)


def _not_run(matrix: Matrix, faults: list[ModuleType], why: str, out_dir: Path) -> None:
    """A row for each fault that will not run, so that every report (JUnit included) lists it."""
    matrix.rows += [Row(fault.NAME, not_run=why) for fault in faults]
    matrix.write(out_dir)
