"""The soak in small: two kill-worker drills back to back in one `lab` process on netns
hosts, then a census of everything a lab could leak (see lab.soak). `make soak` runs the
full one and writes docs/reliability.md."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, needs_netns

pytestmark = [pytest.mark.slow, needs_netns, pytest.mark.alone]  # its census is of the whole machine


def test_two_kill_worker_cycles_survive_and_leak_nothing(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "lab.soak", "--cycles", "kill-worker=2", "--json", str(tmp_path / "soak.json")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},  # no reference remembered yet
    )
    result = json.loads((tmp_path / "soak.json").read_text())
    assert [c["verdict"] for c in result["cycles"]] == ["pass"] * 2, out.stdout[-3000:]
    assert all(c["style"] == "in-process" and c["recoveries"] == 1 for c in result["cycles"])  # the default
    # The first cycle runs the uninterrupted reference; the second is judged against its checksum,
    # and leaks are counted from after the first cycle (which warms caches that stay) to after it.
    assert [c["reference"] for c in result["cycles"]] == ["ran", "cached"]
    assert result["leaked"] == {}, f"left behind after 2 cycles: {result['leaked']}"
    assert out.returncode == 0 and "| local | kill-worker | in-process | 2 | 2 |" in out.stdout
