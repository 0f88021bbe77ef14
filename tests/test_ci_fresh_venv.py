"""The CI kit as a project's CI installs and runs it: the lab built as a wheel, installed into
a fresh virtualenv by an unprivileged user (uid 65534 when the suite runs as root: no root, no
Docker, no netns), then `lab ci` (the default drills and the fault-free reference, loopback,
1 x 2) and `pytest --lab-script` on a user's unmodified script. The steps of docs/ci.md's
workflow, less the download. (Refusals without a run: tests/unit/test_ci_outputs.py and
tests/unit/test_pytest_plugin.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import REPO, left_behind, loopback_labs

pytestmark = [pytest.mark.slow, loopback_labs]  # lab ci runs on loopback hosts
SCRIPT = REPO / "tests" / "user_scripts" / "snapshot_every_epoch.py"
NOBODY = 65534
PYTHON = "/usr/bin/python3.11"  # a python any user may run (the suite's may live under /root)


class Unprivileged:
    """Commands run in `home` as uid 65534 when this is root, else as this user."""

    def __init__(self, home: Path, pip: dict[str, str]):
        self.home, self.pip = home, pip

    def __call__(self, *argv: str, timeout: float) -> subprocess.CompletedProcess:
        drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if os.geteuid() == 0 else []
        env = {"PATH": f"{self.home / 'v' / 'bin'}:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8"}
        env.update(self.pip)
        return subprocess.run([*drop, *argv], cwd=self.home, env=env, capture_output=True, text=True, timeout=timeout)


def pip_settings(top: Path) -> dict[str, str]:
    """This machine's pip settings, for the CI user, as a runner's own would be: here they name the
    wheels on disk (torch's CPU build among them) and a package mirror. Without them that user's
    pip took PyPI's default torch and its gigabytes of CUDA libraries, where the workflow
    (docs/ci-workflow.yml) installs the CPU build first."""
    settings = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    conf = Path(os.path.expanduser("~/.config/pip/pip.conf"))  # the suite user's: not readable by 65534
    if conf.is_file():
        shutil.copy(conf, top / "pip.conf")
        (top / "pip.conf").chmod(0o644)
        settings["PIP_CONFIG_FILE"] = str(top / "pip.conf")
    return settings


@pytest.fixture(scope="module")
def kit():
    """The fresh virtualenv with the lab's wheel (and pytest) installed, and its user. In a temp
    dir of its own that user may enter (pytest's own are the suite user's alone), removed after."""
    if not os.access(PYTHON, os.X_OK):
        pytest.fail(f"{PYTHON} is needed to make the fresh virtualenv (make host-deps installs python3.11-venv)")
    top = Path(tempfile.mkdtemp(prefix="tlab-ci-kit-"))
    try:
        yield install(top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def install(top: Path) -> Unprivileged:
    wheels, home = top / "wheels", top / "home"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    home.mkdir()
    for path in (top, wheels, *wheels.iterdir()):
        path.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(home, NOBODY, NOBODY)
    user = Unprivileged(home, pip_settings(top))
    started = time.monotonic()
    made = user(PYTHON, "-m", "venv", str(home / "v"), timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]
    wheel = next(wheels.glob("torchrun_lab-*.whl"))
    # The workflow's two steps: torch's CPU build, then the kit. --no-compile, as many CI setups
    # do: compiling torch's whole tree was most of the install (about 130 s of it here); the
    # modules a run imports are compiled on first import instead.
    pip = [str(home / "v/bin/pip"), "install", "--quiet", "--no-compile"]
    for what in (["torch==2.13.0"], [str(wheel), "pytest"]):
        installed = user(*pip, *what, timeout=900)
        assert installed.returncode == 0, installed.stderr[-3000:]
    cpu_build = user(str(home / "v/bin/python"), "-c", "import torch; print(torch.version.cuda)", timeout=120)
    print(f"torch's CUDA in the CI user's venv: {cpu_build.stdout.strip()}")
    print(f"fresh virtualenv and install: {time.monotonic() - started:.0f} s")
    return user


def leaks(run_dir: Path) -> list[str]:
    """What the CI user's lab left. Its mark is that user's: the lab refuses it to anyone else
    (lab.ownership), so the test reads the lab id from the file itself."""
    from lab.ownership import MARK_FILE

    mark = run_dir / MARK_FILE
    return left_behind(run_dir, json.loads(mark.read_text())["lab_id"]) if mark.is_file() else []


def test_lab_ci_passes_the_default_drills_and_leaves_junit_a_summary_and_the_page(kit):
    home = kit.home
    (home / "summary.md").write_text("earlier steps' summary\n")
    if os.geteuid() == 0:
        os.chown(home / "summary.md", NOBODY, NOBODY)  # as an earlier step of that user's job left it
    started = time.monotonic()
    out = kit(
        "lab", "ci", "--script", str(SCRIPT), "--junit", "junit.xml", "--summary", "summary.md",
        "--run-dir", str(home / "run"), "--", "--epochs", "6", timeout=600,
    )  # fmt: skip
    print(f"lab ci, default subset: {time.monotonic() - started:.0f} s")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    suite = ET.parse(home / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.attrib["tests"] == "4" and suite.attrib["failures"] == "0"
    names = [c.attrib["name"] for c in suite.iter("testcase")]
    assert names == ["reference", "kill-worker", "hang-rank", "rank-exception"]
    text = (home / "summary.md").read_text()
    assert text.startswith("earlier steps' summary\n# Fault matrix: snapshot_every_epoch.py (1 x 2, local): PASS")
    assert (home / "lab-ci-report" / "matrix.html").is_file()
    assert leaks(home / "run") == []


def test_the_pytest_option_makes_each_drill_a_test_case(kit):
    home = kit.home
    out = kit(
        "pytest", "-p", "no:cacheprovider", "--rootdir", str(home), "--lab-script", str(SCRIPT),
        "--lab-faults", "rank-exception", "--lab-script-args", "--epochs 6",
        "--lab-report-dir", "plugin-report", "--junitxml", "drills.xml", timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    cases = ET.parse(home / "drills.xml").getroot().iter("testcase")
    assert [(c.attrib["classname"], c.attrib["name"], list(c)) for c in cases] == [
        ("lab-drills", "reference", []),
        ("lab-drills", "rank-exception", []),
    ]
    assert (home / "plugin-report" / "matrix.json").is_file()
    shutil.rmtree(home / "plugin-report")


def test_a_report_dir_this_user_may_not_write_is_one_line_and_nothing_runs(kit):
    """As the CI user (not root, when the suite is): a folder it may not write in."""
    if os.geteuid() != 0:
        pytest.skip("needs a folder this user may not write: the suite runs as root in CI")
    out = kit("lab", "ci", "--script", str(SCRIPT), "--report-dir", "/root/lab-ci-report", timeout=60)
    assert out.returncode == 1 and out.stdout == "", out.stdout + out.stderr
    said = "lab ci: error: cannot write in /root (--report-dir /root/lab-ci-report): permission denied"
    assert out.stderr.strip() == said
