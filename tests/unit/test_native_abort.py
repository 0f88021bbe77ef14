"""A native abort's last words in a node log (lab.node_log.native_aborts), read from the node log
of a recorded `lab bench diagnosis` cell: gloo aborting a rank on a collective mismatch, with no
`[rankN]:` on any of its lines."""

from __future__ import annotations

from pathlib import Path

from lab.node_log import native_aborts
from lab.why import mismatch

CELL = Path(__file__).resolve().parents[1] / "fixtures" / "diagnosis" / "trainer-mismatch-no-detail-r2-s10"


def test_the_abort_is_read_with_the_scripts_own_frame_and_without_gloo_source_paths():
    [(error, where)] = native_aborts((CELL / "nodes" / "node1" / "node.log").read_text())
    assert error.startswith("gloo::EnforceNotMet: op.preamble.length <= op.nbytes.") and "/__w/" not in error
    assert where.endswith("lab/workloads/collective_loop.py:51")  # not threading.py, not the lab's watcher
    assert mismatch.size_mismatch(error)


def test_a_log_without_an_abort_has_none_and_two_aborts_are_two():
    quiet = (CELL / "nodes" / "node0" / "node.log").read_text()
    assert native_aborts(quiet) == []
    one = "terminate called after throwing an instance of 'c10::Error'\n  what():  boom\nFatal Python error: Aborted\n"
    assert [e for e, _ in native_aborts(one + quiet + one)] == ["c10::Error: boom", "c10::Error: boom"]
