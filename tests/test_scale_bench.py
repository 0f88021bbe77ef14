"""`lab bench scale` (lab.bench.scale, lab.bench.scale_sim): the in-process recovery protocol with
simulated ranks and keepers against a real TCPStore, in a network namespace of its own."""

from __future__ import annotations

import json

import pytest
from conftest import needs_netns

from lab.bench.scale import growth, world_sizes
from lab.errors import LabError


@pytest.mark.parametrize(
    ("text", "per_node", "said"),
    [
        ("64,abc", 8, "whole numbers"),
        ("60", 8, "multiple of --per-node 8"),
        ("8", 8, "two nodes or more"),
        ("", 8, "multiple of --per-node"),
        ("64", 0, "--per-node must be at least 1"),
    ],
)
def test_world_sizes_that_cannot_be_simulated_are_refused_in_one_line(text, per_node, said):
    with pytest.raises(LabError, match=said):
        world_sizes(text, per_node)


def test_the_growth_law_is_fitted_between_the_two_largest_sizes():
    rows = [{"ranks": 16, "t": 5.0}, {"ranks": 64, "t": 1.0}, {"ranks": 256, "t": 4.0}]
    assert growth(rows, "t") == pytest.approx(1.0)
    assert growth(rows[:1], "t") is None


@pytest.mark.slow
@needs_netns
def test_the_simulated_keepers_calls_stay_flat_per_keeper_and_every_rank_regroups(lab, tmp_path):
    """Real store, real roll call: at 24 and 128 ranks (3 and 16 keepers, each watching two) every rank came back
    in the new generation, each keeper's store calls a second are the same, and none is lost."""
    done = lab("bench", "scale", "--ranks", "24,128", "--keep-s", "1.5", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads((tmp_path / "scale.json").read_text())["figures"]["rows"]
    assert [r["ranks"] for r in rows] == [24, 128] and [r["nodes"] for r in rows] == [3, 16]
    for row in rows:
        assert 5 <= row["calls_per_rank"] < 5.2  # wait, read the generation, count in, wait for all, read the id
        assert row["false_losses"] == 0
    small, large = (r["calls_per_s"] / r["nodes"] for r in rows)
    assert large < 1.5 * small  # every keeper reading every beat: 4x as many at 16 nodes


@pytest.mark.slow
@needs_netns
def test_the_recovery_bench_times_in_process_recovery_at_the_world_size_asked(lab, tmp_path):
    """--worlds 8: four netns hosts of two ranks, one kill, the row named for its size, with the
    stages every in-process recovery records."""
    done = lab(
        "bench", "recovery", "--styles", "in-process", "--worlds", "8", "--trials", "1", "--hosts", "netns",
        "--out", str(tmp_path), timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    rows = json.loads((tmp_path / "recovery.json").read_text())["figures"]["styles"]
    assert list(rows) == ["in-process at 8 ranks"] and rows["in-process at 8 ranks"]["world"] == 8
    row = rows["in-process at 8 ranks"]
    assert row["work_lost_steps"] <= 1, row
    assert {"detect", "regroup", "state_from_peer", "first_step"} <= set(row["stages"]), row
