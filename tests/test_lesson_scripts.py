"""The lesson's two scripts under bare torchrun print what the lesson says they print."""

import re

import pytest
from conftest import torchrun

from lab import results
from lab.workloads import script_path

pytestmark = pytest.mark.slow


def test_ddp_train_two_processes_matches_the_lesson():
    out = torchrun("--standalone", "--nproc-per-node=2", script_path("ddp_train"))
    assert out.returncode == 0, out.stderr
    losses = re.findall(r"^step (\d) loss (\S+)$", out.stdout, re.M)
    assert losses == [("0", "1.0865"), ("1", "0.9100"), ("2", "0.8038")]
    ranks = results.parse(out.stdout, node="local")
    assert sorted(r.rank for r in ranks) == [0, 1]
    checksums = [float(r.checksum) for r in ranks]
    assert abs(checksums[0] - checksums[1]) <= 1e-6
    # The lesson printed -4.635065; torch 2.13 here gives -4.635064 (reduction order).
    # "-4.63506 within 2e-6" in the issue would exclude both, so compare with the lesson's figure.
    assert checksums[0] == pytest.approx(-4.635065, abs=2e-6)


def test_ddp_broadcasts_rank_zeros_weights_at_construction():
    out = torchrun("--standalone", "--nproc-per-node=2", script_path("broadcast_demo"))
    assert out.returncode == 0, out.stderr
    seen = {
        int(r): (b, a)
        for r, b, a in re.findall(r"^rank (\d) weight\[0\]\[0\] before DDP (\S+) after DDP (\S+)$", out.stdout, re.M)
    }
    assert seen[1][0] == "+0.2576", "rank 1 starts from its own seed"
    assert seen[0] == ("-0.0037", "-0.0037")
    assert seen[1][1] == "-0.0037", "after DDP rank 1 holds rank 0's weight"
