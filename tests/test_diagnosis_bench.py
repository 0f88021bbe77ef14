"""`lab bench diagnosis` end to end: real jobs broken by real signals, graded from what the
agents and ranks recorded. A segfault is the case only the agents' full record gets right:
torch reports one failed rank per node, and on the node of the crashed rank that is often its
neighbour, which died of the lost connection a moment later. A frozen rank is a hang cell: torch's
own Flight Recorder analyzer is run on it too, and cannot decide (the frozen rank leaves no dump)."""

from __future__ import annotations

import json

import pytest
from conftest import bench_leaves_nothing, loopback_labs

pytestmark = [pytest.mark.slow, loopback_labs]  # loopback hosts: torchrun's port on this machine


def test_the_bench_names_each_injected_rank_and_writes_its_table(lab, tmp_path):
    """docs/exercises.md's command (its --out aside): both targets, by default."""
    with bench_leaves_nothing("diagnosis"):
        out = lab(
            "bench", "diagnosis", "--classes", "segfault,sigstop", "--positions", "last",
            "--at-steps", "5", "--out", str(tmp_path), timeout=600,
        )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    result = json.loads((tmp_path / "diagnosis.json").read_text())
    cells = result["figures"]["cells"]
    assert len(cells) == 4 and all(c["job_ended"] for c in cells)
    assert all(c["right"] and c["rank"] == 3 for c in cells), [c["card"] for c in cells]
    assert "| **all** | 4 | 4 | 4 |" in "\n".join(result["markdown"])
    assert "- Goal: 0 cells with a wrong rank named: **met** (0)" in result["markdown"]
    analyzed = [c["flight_recorder"] for c in cells if c["fault"] == "sigstop"]
    assert len(analyzed) == 2 and all(a["ranks"] == [3] and not a["certain"] and not a["failed"] for a in analyzed)
    assert "| sigstop | 2 | 2 | 0 | 2 | 0 | 0 |" in result["markdown"]
    assert all("flight_recorder" not in c for c in cells if c["fault"] == "segfault")
