"""The fsdp-shards lesson's verdict, on the lines its workload printed in real runs.

tests/fixtures/lessons/fsdp_shards_{2,4}.txt are lab/workloads/shard_memory.py's lines from
`torchrun --nproc-per-node=2` and `=4` on this machine (gloo, CPU). The lesson's jobs are answered
with them here, so each claim can also be shown failing on a run that breaks it (a line
changed by hand); the lesson runs for real, its verdict asserted, in the README's order
(tests/test_docs_path.py). The figures below are worked out from the model by hand: 4 layers of
a 256 x 256 weight and a 256 bias, float32: 4 x 65,792 x 4 = 1,052,672 bytes, one weight
262,144 bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.lessons import fsdp_shards
from lab.lessons.runner import JobOutput
from lab.report import Report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lessons"
MODEL, WEIGHT = 1_052_672, 262_144


def recorded(world: int) -> list[str]:
    return (FIXTURES / f"fsdp_shards_{world}.txt").read_text().splitlines()


class Jobs:
    """A Lesson whose jobs are answered with recorded lines (changed by `edit`), not run."""

    def __init__(self, edit=lambda world, lines: lines):
        self.report = Report("fsdp-shards", "local", 0)
        self.edit, self.worlds = edit, []

    def job(self, name, topology, script, args=()):
        world = topology.world_size
        self.worlds.append((world, script))
        return JobOutput(name, {"node0": 0}, self.edit(world, recorded(world)))


def failed(report: Report) -> list[str]:
    return [c.name for c in report.checks if not c.ok]


def test_the_recorded_runs_pass_every_claim_with_the_bytes_worked_out_by_hand():
    lesson = Jobs()
    fsdp_shards.run(lesson)
    assert lesson.worlds == [(2, "shard_memory"), (4, "shard_memory")]
    assert lesson.report.verdict == "pass", failed(lesson.report)
    assert len(lesson.report.checks) == 2 * 7
    four = lesson.report.facts["bytes_per_rank_4"]
    assert sorted(four) == [0, 1, 2, 3]
    assert four[3]["ddp"] == {"params": MODEL, "grads": MODEL, "adam": 2 * MODEL, "model": MODEL, "seen": WEIGHT}
    assert four[3]["fsdp2"] == {
        "params": MODEL // 4, "grads": MODEL // 4, "adam": MODEL // 2, "model": MODEL, "seen": WEIGHT,
    }  # fmt: skip
    assert lesson.report.facts["bytes_per_rank_2"][1]["fsdp2"]["params"] == MODEL // 2


def changed(world: int, old: str, new: str, rank: int = 1):
    """An edit of one rank's lines of the `world` run."""

    def edit(w, lines):
        return [line.replace(old, new) if w == world and f"] rank {rank} " in line else line for line in lines]

    return edit


@pytest.mark.parametrize(
    ("edit", "claim"),
    [
        (changed(4, "fsdp2 holds params 263168", "fsdp2 holds params 1052672"),
         "4 ranks, FSDP2: each rank holds 1/4"),
        (changed(2, "adam 1052672 of model", "adam 2105344 of model"),
         "2 ranks, FSDP2: each rank holds 1/2"),
        (changed(4, "ddp holds params 1052672 grads 1052672", "ddp holds params 1052672 grads 263168"),
         "4 ranks, DDP: every rank holds the whole model"),
        (changed(4, "fsdp2 holds params 263168 grads 263168 adam 526336 of model 1052672 bytes; a layer's forward "
                    "saw 262144", "fsdp2 holds params 263168 grads 263168 adam 526336 of model 1052672 bytes; a "
                    "layer's forward saw 65536"),
         "4 ranks, FSDP2: a layer's forward saw its whole weight"),
        (changed(2, "loaded -0x1.978cb2ccbe9c0p+7", "loaded -0x1.978cb2ccbe9bfp+7"),
         "2 ranks, DDP's checkpoint: one file"),
        (changed(4, "loaded by one process whole -0x1.aaa5690bdd100p+7", "loaded by one process whole -0x1.aa0p+7",
                 rank=0),
         "4 ranks, DCP's checkpoint"),
        (changed(4, "4 shard files", "3 shard files", rank=2), "4 ranks, DCP's checkpoint"),
        (changed(4, "checksum trained -0x1.aaa5690bdd100p+7", "checksum trained -0x1.aab0000000000p+7", rank=0),
         "4 ranks: DDP and FSDP2 trained the same model"),
    ],
    ids=["not-sharded", "adam-whole", "ddp-grads-shard", "not-gathered", "ddp-load-differs", "dcp-load-differs",
         "a-shard-missing", "fsdp2-diverged"],
)  # fmt: skip
def test_each_claim_fails_on_a_run_that_breaks_it(edit, claim):
    lesson = Jobs(edit)
    fsdp_shards.run(lesson)
    assert [name for name in failed(lesson.report) if name.startswith(claim)], failed(lesson.report)
    assert lesson.report.verdict == "fail"


def test_a_rank_that_said_nothing_fails_its_world_and_nothing_is_judged_on_half_a_run():
    lesson = Jobs(lambda w, lines: [line for line in lines if not (w == 4 and "] rank 2 " in line)])
    fsdp_shards.run(lesson)
    assert failed(lesson.report) == ["4 ranks: every rank ran both and said what it holds"]
    assert not [c for c in lesson.report.checks if c.name.startswith("4 ranks,")]


def test_a_job_that_failed_before_printing_fails_its_world_in_one_check():
    lesson = Jobs(lambda w, lines: [] if w == 2 else lines)
    fsdp_shards.run(lesson)
    assert failed(lesson.report) == ["2 ranks: every rank ran both and said what it holds"]
    assert lesson.report.facts["bytes_per_rank_2"] == {}
