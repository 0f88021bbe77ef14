"""torch's Flight Recorder analyzer beside the card (lab.bench.flight_recorder): run for real on
raw dumps recorded from a 2-rank gloo job where rank 1 never joined all-reduce #6
(tests/fixtures/flight_recorder/record.py says how)."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from lab.bench import flight_recorder
from lab.bench.flight_recorder import Verdict, analyze, copy_dumps, graded, read_verdict
from lab.bench.fr_trace_gloo import repair
from lab.bench.grading import FAULTS
from lab.health.hang_dump import DIRECTORY

RECORDED = REPO / "tests" / "fixtures" / "flight_recorder"
SIGSTOP = next(f for f in FAULTS if f.name == "sigstop")
PARTITION = next(f for f in FAULTS if f.name == "partition")


def dumps(tmp_path: Path, ranks=(0, 1)) -> Path:
    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank in ranks:
        shutil.copy(RECORDED / f"fr_rank{rank}", folder)
    return folder


def test_the_analyzer_as_shipped_raises_on_gloo_dumps(tmp_path):
    """Why lab.bench.fr_trace_gloo exists: if torch mends its analyzer, this says the repair can go."""
    argv = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(dumps(tmp_path))]
    shipped = subprocess.run([*argv, "--prefix", "fr_rank"], capture_output=True, text=True, timeout=120)
    assert shipped.returncode != 0 and "KeyError: ('0', 0)" in shipped.stderr, shipped.stderr[-800:]


def test_repaired_it_names_the_rank_that_never_joined(tmp_path):
    verdict = analyze(dumps(tmp_path))
    assert verdict == Verdict((1,), True, verdict.said) and "missing ranks: {1}" in verdict.said, verdict


def test_a_rank_that_left_no_dump_is_named_without_confidence(tmp_path):
    verdict = analyze(dumps(tmp_path, ranks=(0,)))
    assert (verdict.ranks, verdict.certain, verdict.failed) == ((1,), False, False), verdict


def test_the_repair_names_the_group_as_its_entries_do_and_changes_nothing_else():
    dump = pickle.loads((RECORDED / "fr_rank0").read_bytes())
    assert "" in dump["pg_config"]  # as gloo wrote it
    before = {k: v for k, v in dump.items() if k != "pg_config"}
    mended = repair(pickle.loads((RECORDED / "fr_rank0").read_bytes()))
    assert mended["pg_config"] == {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    assert {k: v for k, v in mended.items() if k != "pg_config"} == before


def test_only_the_answering_ranks_dumps_are_copied_and_no_link_is_followed(tmp_path):
    forensics = tmp_path / "events" / DIRECTORY
    forensics.mkdir(parents=True)
    shutil.copy(RECORDED / "fr_rank0", forensics)
    shutil.copy(RECORDED / "fr_rank1", forensics)
    (forensics / "fr_rank2").symlink_to(RECORDED / "fr_rank1")  # planted by a job
    assert copy_dumps(tmp_path / "events", [0, 2], tmp_path / "copies") == 1
    assert sorted(p.name for p in (tmp_path / "copies").iterdir()) == ["fr_rank0"]


def test_the_first_finding_is_the_one_read():
    printed = "we missed FR dumps from ranks ({2}) so ...\nNot all ranks joining collective\nmissing ranks: {1}\n"
    assert read_verdict(printed, 0) == Verdict((2,), False, "we missed FR dumps from ranks ({2}) so ...")
    assert read_verdict(printed.split("\n", 1)[1], 0) == Verdict((1,), True, "missing ranks: {1}")
    assert read_verdict("missing ranks: {3, 1}\n", 0).ranks == (1, 3)


def test_a_failed_run_is_its_last_line_and_no_dump_is_no_run(tmp_path):
    said = read_verdict("Traceback (most recent call last):\n  ...\nKeyError: ('0', 0)\n", 1)
    assert said == Verdict(said="KeyError: ('0', 0)", failed=True)
    (tmp_path / "empty").mkdir()
    assert analyze(tmp_path / "empty").failed


@pytest.mark.parametrize(
    "verdict, fault, rank, right, unknown, wrong",
    [
        (Verdict((1,), True), SIGSTOP, 1, True, False, False),
        (Verdict((1,), True), SIGSTOP, 2, False, False, True),
        (Verdict((1,), False), SIGSTOP, 1, False, True, False),  # could not decide: names none
        (Verdict((), False, failed=True), SIGSTOP, 1, False, True, False),
        (Verdict((2, 3), True), PARTITION, 2, False, False, False),  # the node's ranks, not its class
        (Verdict((0, 1), True), PARTITION, 2, False, False, True),
    ],
)
def test_graded_as_a_card_is(verdict, fault, rank, right, unknown, wrong):
    grade = graded("trainer", fault, rank, 6, verdict)
    assert (grade.right, grade.unknown, grade.wrong_rank) == (right, unknown, wrong), grade


def test_it_runs_on_hang_cells_only():
    hangs = {f.name for f in FAULTS if f.expect in flight_recorder.HANGS}
    assert hangs == {"sigstop", "gil-hang", "py-hang", "partition"}


def test_a_rank_writes_its_raw_dump_beside_its_answer(tmp_path):
    """A real one-rank gloo group, recording: hang_dump.write_dump leaves fr_rank0, which
    unpickles to the recorder's entries, and rank0.json after it."""
    code = (
        "import sys, torch, torch.distributed as dist\n"
        "from pathlib import Path\n"
        "from lab.health import hang_dump\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path}/store', rank=0, world_size=1)\n"
        "dist.all_reduce(torch.ones(2))\n"
        f"hang_dump.write_dump(Path('{tmp_path}'), 0, 'r1')\n"
        # As every rank leaves: a group never destroyed was torn down by the interpreter's exit, and
        # once in a CI run (a loaded machine) a gloo thread still joinable then aborted it (SIGABRT).
        "dist.destroy_process_group()\n"
    )
    env = {"TORCH_FR_BUFFER_SIZE": "20", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-800:]
    raw = pickle.loads((tmp_path / "fr_rank0").read_bytes())
    assert [e["profiling_name"] for e in raw["entries"]] == ["gloo:all_reduce"]
    assert (tmp_path / "rank0.json").stat().st_mtime_ns >= (tmp_path / "fr_rank0").stat().st_mtime_ns


def test_the_table_counts_each_side_and_the_goal_fails_where_the_analyzer_wins():
    from lab.bench.diagnosis_table import analyzer_table
    from lab.bench.grading import Grade

    py_hang = next(f for f in FAULTS if f.name == "py-hang")

    def cell(fault, card_rank, verdict):
        card = Grade("trainer", fault.name, 1, 6, card_rank, "hung", 6, fault.expect)
        fr = graded("trainer", fault, 1, 6, verdict)
        return card, {"flight_recorder": {**verdict.to_json(), **fr.to_json()}}

    stopped = Verdict((1,), False, "cannot decide ({1})")
    cells = [
        cell(SIGSTOP, 1, stopped),
        cell(SIGSTOP, 1, stopped),
        cell(py_hang, 2, Verdict((1,), True, "missing ranks: {1}")),
    ]
    lines = analyzer_table([*cells, (cells[0][0], {})])  # a cell without the analyzer is left out
    assert "| sigstop | 2 | 2 | 0 | 2 | 0 | 0 |" in lines and "| py-hang | 1 | 0 | 1 | 0 | 0 | 0 |" in lines
    assert "- Goal: the card at least as right as the analyzer on every hang cell: **missed** (1)" in lines
    assert lines.count("- sigstop, cells of rank 1: cannot decide ({N})") == 1
    assert analyzer_table([(cells[0][0], {})]) == []
