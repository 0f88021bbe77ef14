"""A drill matrix (lab.exercises.script.matrix) as JUnit XML, the test report every CI reads:
one test case per run (the fault-free reference, then each fault), a failed verdict as a
failure carrying the finding and every check, a run that could not happen as an error."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from lab import job_text


def checks_text(row: dict[str, Any]) -> str:
    return "\n".join(f"[{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}" for c in row.get("checks", []))


def junit_xml(record: dict[str, Any]) -> str:
    record = job_text.cleaned(record)  # a script's coloured exception is no XML
    rows = record["rows"]
    suite_name = f"torchrun-lab drills on {Path(record['script']).name}"
    counts = {
        "tests": len(rows),
        "failures": sum(r["verdict"] == "fail" for r in rows),
        "errors": sum(r["verdict"] in ("error", "not run") for r in rows),
        "skipped": sum(r["verdict"] == "skip" for r in rows),
    }
    totals = {k: str(v) for k, v in counts.items()}
    suites = ET.Element("testsuites", {"name": "torchrun-lab", **totals})
    suite = ET.SubElement(suites, "testsuite", {"name": suite_name, **totals})
    for row in rows:
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=row["fault"])
        if row["verdict"] == "fail":
            failure = ET.SubElement(case, "failure", message=row["finding"][:1000], type="verdict")
            failure.text = checks_text(row)
        elif row["verdict"] in ("error", "not run"):
            ET.SubElement(case, "error", message=(row["finding"] or row["verdict"])[:1000], type=row["verdict"])
        elif row["verdict"] == "skip":
            ET.SubElement(case, "skipped", message=row["finding"][:1000])
        else:
            ET.SubElement(case, "system-out").text = f"{row['finding']}\n{checks_text(row)}"
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
