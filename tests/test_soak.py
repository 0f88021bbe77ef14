"""The soak in small: three kill-worker drills back to back in one `lab` process on netns
hosts, then a census of everything a lab could leak (see lab.soak). `make soak` runs the
full one and writes docs/reliability.md."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, needs_netns

pytestmark = [pytest.mark.slow, needs_netns]


def test_three_kill_worker_cycles_survive_and_leak_nothing(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "lab.soak", "--cycles", "kill-worker=3", "--json", str(tmp_path / "soak.json")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},  # no reference remembered yet
    )
    result = json.loads((tmp_path / "soak.json").read_text())
    assert [c["verdict"] for c in result["cycles"]] == ["pass"] * 3, out.stdout[-3000:]
    assert all(c["restarts"] == 1 for c in result["cycles"])
    # The first cycle runs the uninterrupted reference; the next two are judged against its checksum.
    assert [c["reference"] for c in result["cycles"]] == ["ran", "cached", "cached"]
    assert result["leaked"] == {}, f"left behind after 3 cycles: {result['leaked']}"
    assert out.returncode == 0 and "| local | kill-worker | 3 | 3 |" in out.stdout
