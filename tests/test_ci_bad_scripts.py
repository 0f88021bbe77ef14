"""`lab ci` on scripts a CI runner cannot drill, for real: each is one line naming why (the last
line of its output, where a CI log's reader looks), exit 1, only the reference run (the faults
would have nothing to break, and are listed as not run), and nothing left running. Refusals before any run:
tests/unit/test_ci_outputs.py; the verdicts' wording on recorded runs: tests/unit/test_script_judge.py."""

import json

import pytest
from conftest import REPO, left_behind, loopback_labs

pytestmark = [pytest.mark.slow, loopback_labs]  # lab ci runs on loopback hosts
SCRIPTS = REPO / "tests" / "user_scripts"


@pytest.mark.parametrize(
    "script, words",
    [
        ("needs_gpu.py", ["_cuda_setDevice", "needs_gpu.py:", "fall back to the CPU and gloo"]),
        ("exits_at_once.py", ["it runs long enough for a fault to fire: no.", "with no step printed", "--at-time"]),
    ],
)
def test_a_script_with_nothing_to_drill_is_one_line_and_stops_after_the_reference(lab, tmp_path, script, words):
    report = tmp_path / "report"
    out = lab("ci", "--script", str(SCRIPTS / script), "--report-dir", str(report), "--run-dir", str(lab.run_dir))
    lab_id = lab.lab_id
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert last.startswith("lab ci: reference: fail: ") and all(w in last for w in words), last
    rows = json.loads((report / "matrix.json").read_text())["rows"]
    assert [(r["fault"], r["verdict"]) for r in rows] == [
        ("reference", "fail"),
        *((f, "not run") for f in ("kill-worker", "hang-rank", "rank-exception")),
    ]  # the faults never ran, and every report says so (the JUnit file held only the reference)
    assert all(r["finding"] == "not run: the fault-free reference did not pass (fail)" for r in rows[1:])
    assert "Traceback" not in out.stderr.replace(last, "")
    assert left_behind(lab.run_dir, lab_id) == []
