"""A script's own text (a coloured exception, control characters) in the reports a CI reads:
the JUnit XML parses, the markdown table keeps its shape, the HTML page carries no raw markup
(issue 52, item 12). The rows are built here as the matrix records them."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from lab.exercises.script import junit, matrix, page

HOSTILE = "\x1b[31mRuntimeError: boom\x1b[0m\x00\x07\x0c\x1b]0;title\x07 | </td><script>x</script>\ud800\nnext"


def record(finding: str) -> dict:
    row = {"fault": "kill-worker", "verdict": "fail", "finding": finding, "restarts": 1, "work_redone": None,
           "recovery_s": 0.4, "progress_source": finding, "timeline": None,
           "checks": [{"name": "detected", "ok": False, "detail": finding}]}  # fmt: skip
    return {"script": "/x/train.py", "script_args": [], "nodes": 1, "nproc_per_node": 2, "runtime": "local",
            "verdict": "fail", "rows": [row]}  # fmt: skip


def test_the_junit_xml_of_a_coloured_exception_parses_and_keeps_its_words():
    root = ET.fromstring(junit.junit_xml(record(HOSTILE)).split("\n", 1)[1])
    failure = root.find("./testsuite/testcase/failure")
    assert failure is not None and "RuntimeError: boom" in failure.get("message", "")
    assert "\x1b" not in failure.get("message", "") and "\x00" not in (failure.text or "")


def test_the_markdown_row_stays_one_row_of_seven_cells():
    rows = [line for line in matrix.markdown(record(HOSTILE)).splitlines() if line.startswith("| kill-worker")]
    assert len(rows) == 1
    assert rows[0].count(" | ") == 6 and "<script>" not in rows[0] and "\x1b" not in rows[0]


def test_the_page_escapes_and_strips_what_the_script_printed():
    text = page.html(record(HOSTILE))
    assert "<script>x" not in text and "&lt;script&gt;" in text
    assert not any(ord(c) < 32 and c not in "\n\t" for c in text) and "\x1b" not in text
