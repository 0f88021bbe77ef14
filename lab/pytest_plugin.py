"""The CI kit as a pytest option: `pytest --lab-script train.py` adds one test case per drill.

    pytest --lab-script train.py [--lab-faults kill-worker,hang-rank,rank-exception]
           [--lab-script-args "--epochs 4"] [--lab-nproc-per-node 2] [--lab-recovery STYLE]
           [--lab-report-dir DIR]

Installed with the lab (the `pytest11` entry point in pyproject.toml); without --lab-script
it adds nothing. The cases are `lab-drills::reference` (the fault-free run) and one per
fault, so `-k`, JUnit XML (`--junitxml`) and a CI's test view treat each as a test. The
first case to run runs `lab ci` once, in a process of its own, for the cases still
selected; each case then passes or fails on its own row of that matrix, with the finding
and every check as its failure message. Everything `lab ci` leaves (matrix.html, each
run's report) is in the report dir.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab import recovery
from lab.cli.ci import DEFAULT_FAULTS
from lab.exercises.script.junit import checks_text
from lab.exercises.script.script_run import REFERENCE


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torchrun-lab", "fault drills on your training script (torchrun lab)")
    group.addoption("--lab-script", metavar="PATH", help="your training script: one test case per drill")
    group.addoption("--lab-faults", default=DEFAULT_FAULTS, help="the drills (default %(default)s)")
    group.addoption("--lab-script-args", default="", metavar="ARGS", help="your script's arguments, one string")
    group.addoption("--lab-nproc-per-node", type=int, default=2, metavar="N", help="processes (default 2)")
    group.addoption(
        "--lab-recovery", default=recovery.AUTO, choices=recovery.CHOICES, help="lab ci's --recovery (default auto)"
    )
    group.addoption("--lab-report-dir", default="lab-ci-report", metavar="DIR", help="where lab ci leaves its reports")


class DrillFailed(Exception):
    """A verdict that is not pass: its finding and checks are the test's failure."""


class DrillCase(pytest.Item):
    """One row of the matrix: the reference or one fault."""

    def runtest(self) -> None:
        why = failure(self.name, matrix_rows(self.session).get(self.name), self.config.stash[RUN_ERROR])
        if why:
            raise DrillFailed(why)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style=None) -> str:
        if isinstance(excinfo.value, DrillFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"lab-drills::{self.name}"


ROWS = pytest.StashKey[dict[str, dict[str, Any]]]()
RUN_ERROR = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    script = config.getoption("lab_script", None)
    if script and not Path(script).is_file():
        raise pytest.UsageError(f"--lab-script: script not found: {script}")


def failure(name: str, row: dict[str, Any] | None, run_error: str) -> str:
    """Why the drill case fails ("" when its verdict passed): its row's verdict, finding and
    checks, or, with no row, what stopped lab ci (a refused fault, the script failing alone)."""
    if row is None:
        return run_error or f"{name}: no verdict in the matrix"
    if row["verdict"] == "pass":
        return ""
    return f"{name}: {row['verdict']}: {row['finding']}\n{checks_text(row)}".rstrip()


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    script = config.getoption("lab_script")
    if not script:
        return
    names = [REFERENCE, *(f.strip() for f in config.getoption("lab_faults").split(",") if f.strip())]
    items.extend(DrillCase.from_parent(session, name=name, nodeid=f"lab-drills::{name}") for name in names)


def matrix_rows(session: pytest.Session) -> dict[str, dict[str, Any]]:
    """The matrix's rows by fault: `lab ci` run once, for the drill cases still selected."""
    config = session.config
    if ROWS in config.stash:
        return config.stash[ROWS]
    faults = [i.name for i in session.items if isinstance(i, DrillCase) and i.name != REFERENCE]
    report_dir = Path(config.getoption("lab_report_dir"))
    argv = [sys.executable, "-m", "lab", "ci", "--script", config.getoption("lab_script")]
    argv += ["--faults", ",".join(faults) or "kill-worker", "--report-dir", str(report_dir)]
    argv += ["--nproc-per-node", str(config.getoption("lab_nproc_per_node"))]
    argv += ["--recovery", config.getoption("lab_recovery")]
    argv += ["--", *shlex.split(config.getoption("lab_script_args"))]
    done = subprocess.run(argv, stderr=subprocess.PIPE, text=True)  # its progress: the first case's output
    config.stash[RUN_ERROR] = (done.stderr.strip().splitlines() or [f"lab ci exited {done.returncode}"])[-1]
    matrix = report_dir / "matrix.json"
    rows = json.loads(matrix.read_text())["rows"] if done.returncode in (0, 1) and matrix.is_file() else []
    config.stash[ROWS] = {row["fault"]: row for row in rows}
    return config.stash[ROWS]
