"""`lab ci` for real, as a project's CI step runs it: the default drills (kill-worker, hang-rank)
and the fault-free reference on a user's unmodified script, on loopback, 1 x 2; the JUnit XML,
the job summary and the matrix page it leaves. (Its refusals: tests/unit/test_ci_outputs.py.)"""

import xml.etree.ElementTree as ET

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow
SCRIPT = REPO / "tests" / "user_scripts" / "snapshot_every_epoch.py"


def test_the_default_drills_pass_and_leave_junit_a_summary_and_the_page(lab, tmp_path):
    junit, summary, report = tmp_path / "junit.xml", tmp_path / "summary.md", tmp_path / "report"
    summary.write_text("earlier steps' summary\n")
    out = lab(
        "ci", "--script", str(SCRIPT), "--junit", str(junit), "--summary", str(summary),
        "--report-dir", str(report), "--run-dir", str(lab.run_dir), "--", "--epochs", "6",
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.attrib["tests"] == "3" and suite.attrib["failures"] == "0"
    assert [c.attrib["name"] for c in suite.iter("testcase")] == ["reference", "kill-worker", "hang-rank"]
    text = summary.read_text()
    assert text.startswith("earlier steps' summary\n# Fault matrix: snapshot_every_epoch.py (1 x 2, local): PASS")
    assert (report / "matrix.html").is_file()
