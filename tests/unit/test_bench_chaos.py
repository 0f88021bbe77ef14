"""`lab bench chaos`'s section from a campaign's ledger, and `lab bench goodput` taking that
campaign's share of faults that needed a restart: on a ledger written down here by hand."""

from __future__ import annotations

import argparse
import json

import pytest

from lab.bench.chaos_campaign import section
from lab.bench.goodput import fallback_share
from lab.bench.result import BenchResult
from lab.chaos import schedule
from lab.errors import LabError


def fault(kind: str, back: float | None, finding: str = "", landed: bool = True) -> dict:
    return {
        "kind": kind,
        "planned_at_s": 1.0,
        "ranks": [1],
        "time": 1000.0 if landed else None,
        "front": 40,
        "recovered_s": back,
        "bound_s": 70.0,
        "finding": finding,
    }


def ledger(faults: list[dict], identical: bool = True) -> dict:
    stuck = [f for f in faults if f["finding"].startswith("not back")]
    landed = [f for f in faults if f["time"] is not None]
    return {
        "seed": 3,
        "load": 2,
        "recovery_style": "in-process",
        "world_size": 4,
        "faults_planned": len(faults),
        "faults_injected": len(landed),
        "faults_inside_a_recovery": 1,
        "findings": [f for f in faults if f["finding"]],
        "stuck": len(stuck),
        "wall_s": 100.0,
        "recovery_s": {"kill-worker": 0.9},
        "checkpoint_s": 0.5,
        "productive_s": 98.6,
        "ettr": 0.986,
        "steps_redone": 3,
        "final_weights": {"identical": identical, "why": "" if identical else "rank 0's weights differ"},
        "faults": faults,
        "campaign_s": 600.0,
    }


def test_the_section_counts_each_kind_with_its_median_and_worst_recovery():
    record = ledger(
        [fault("kill-worker", 0.2), fault("kill-worker", 0.4), fault("kill-worker", 0.3), fault("kill-node", 4.0)]
    )
    lines = section(record)
    assert "| kill-node | 1 | 4.00 | 4.00 | 70 | 0 |" in lines
    assert "| kill-worker | 3 | 0.30 | 0.40 | 70 | 0 |" in lines
    assert "- Goal: no stuck recovery: **met** (0 past their bound)" in lines
    assert "- Goal: >= 100 faults in <= 60 minutes: **missed** (4 in 10.0 min)" in lines  # too few faults


def test_a_stuck_recovery_and_a_fault_never_injected_miss_their_goals_and_are_named():
    stuck = fault("hang-worker", None, "not back within 70s: rank 3 at step 40 (the front was step 40)")
    record = ledger([stuck, fault("kill-worker", None, landed=False)], identical=False)
    lines = section(record)
    assert "| hang-worker | 1 | - | - | 70 | 1 |" in lines
    assert "- Finding: hang-worker at step 40: not back within 70s: rank 3 at step 40 (the front was step 40)" in lines
    assert "- Goal: no stuck recovery: **missed** (1 past their bound)" in lines
    assert "- Goal: every fault injected: **missed** (1 of 2)" in lines
    assert "- Goal: final weights bit-identical: **missed** (rank 0's weights differ)" in lines


@pytest.mark.parametrize("wrapped", [False, True], ids=["lab chaos ledger", "lab bench chaos result"])
def test_goodput_takes_the_share_of_faults_that_needed_a_restart(tmp_path, wrapped):
    record = ledger(
        [fault("kill-worker", 0.3), fault("kill-node", 4.0), fault("preempt-node", 8.0), fault("kill-worker", 0.2)]
    )
    path = tmp_path / "chaos.json"
    if wrapped:
        BenchResult("chaos", "lab bench chaos", [], figures=record).save(tmp_path)
    else:
        path.write_text(json.dumps(record))
    share, source = fallback_share(argparse.Namespace(fallback_share=None, chaos_json=str(path)))
    assert share == 0.5 and source.startswith("measured: 2 of 4 faults in ")


@pytest.mark.parametrize("identical", [True, False])
def test_a_scripts_campaign_is_judged_by_its_compared_result_and_says_how_it_was_compared(identical):
    """A script's --compare file within --rtol is not called bit-identical weights: the goal and the
    summary say what was compared and how it came out."""
    record = ledger([fault("kill-worker", 0.3)])
    how = "every number within rtol 0.001 (3 numbers)" if identical else "1 of 3 numbers past rtol 0.001"
    record["final_weights"] = {"identical": identical, "why": "" if identical else how, "compared": "result.txt",
                               "how": how}  # fmt: skip
    lines = section(record)
    verdict = "met" if identical else "missed"
    assert f"- Goal: final result as an uninterrupted run's: **{verdict}** ({how})" in lines
    assert not any("bit-identical" in line for line in lines)
    said = "as" if identical else "differs from"
    assert any(line.endswith(f"final result.txt {said} an uninterrupted run's") for line in lines)


def test_goodput_refuses_a_file_that_is_no_ledger_in_one_line(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"name": "startup", "figures": {"agent": 1.0}}))
    with pytest.raises(LabError, match="is not a `lab chaos` ledger"):
        fallback_share(argparse.Namespace(fallback_share=None, chaos_json=str(path)))


def test_the_plain_train_campaign_outlasts_its_last_fault_and_compares_its_weights_within_the_ddp_tolerance():
    """lab bench chaos --target plain-train: the lab's ordinary script as the user's, paced, with a
    snapshot to resume from and its final weights written for --compare; its paced steps reach a
    minute past the last fault `lab chaos --script` draws for the same flags, for any seed."""
    from lab.bench.chaos_campaign import PLAIN_STEP_S, SCRIPT_TAIL_S, _target
    from lab.chaos.on_script import TRAINER_ONLY

    for seed in (1, 7, 140):
        args = argparse.Namespace(target="plain-train", count=30, mtbf="15s", seed=seed)
        argv = _target(args)
        script_args = argv[argv.index("--") + 1 :]
        steps = int(script_args[script_args.index("--steps") + 1])
        planned = schedule.draw(schedule.parse_mix(None, dict(TRAINER_ONLY)), 15.0, seed, count=30, duration_s=None)
        assert len(planned) == 30 and not {p.kind for p in planned} & set(TRAINER_ONLY)
        assert steps * PLAIN_STEP_S >= planned[-1].at_s + SCRIPT_TAIL_S - PLAIN_STEP_S
        assert argv[argv.index("--compare") + 1] == script_args[script_args.index("--result") + 1]
        assert float(argv[argv.index("--rtol") + 1]) > 0  # DDP's bucket regroup after a resume (the docstring)
    assert "--snapshot-every" in script_args and argv[1].endswith("plain_train.py")
    assert _target(argparse.Namespace(target="trainer", count=30, mtbf="15s", seed=1)) == []


def test_a_ledger_an_earlier_run_left_in_the_report_dir_is_not_taken_for_this_runs(tmp_path, monkeypatch):
    """The bench keeps each campaign's report beside its results (OUT/NAME-report): a campaign that
    wrote nothing this time must not be published with the last one's ledger. lab chaos itself is
    not run here (a stand-in that exits 1 at once); the real one runs in tests/test_chaos.py."""
    import os
    import subprocess
    import types

    from lab.bench import chaos_campaign

    stale = tmp_path / "chaos-report" / "chaos.json"
    stale.parent.mkdir()
    stale.write_text(json.dumps(ledger([fault("kill-worker", 0.3)])))
    an_hour_ago = stale.stat().st_mtime - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))
    monkeypatch.setattr(chaos_campaign.procs, "run_child_lab", lambda argv: subprocess.CompletedProcess(argv, 1))
    args = types.SimpleNamespace(mtbf="15s", load=2, count=3, seed=1, runtime="local", target="trainer")
    with pytest.raises(LabError, match="the campaign wrote no ledger \\(lab chaos exited 1\\)"):
        chaos_campaign.run(args, tmp_path)
