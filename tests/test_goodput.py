"""`lab bench goodput`: the ETTR model against hand-computed values and its known optimum,
and the command on a saved recovery result: table, plot, one-line errors."""

import json
import math
import subprocess
import sys

import pytest

from lab.bench import goodput


def test_ettr_is_the_first_order_model():
    # T = 90 s of training, C = 10 s to save, R = 20 s to recover, M = 1000 s between failures:
    # each failure loses R + (T + C) / 2 = 70 s; ETTR = 0.9 * (1 - 70 / 1000).
    assert goodput.ettr(90, 10, 20, 1000) == pytest.approx(0.9 * 0.93)
    # In-process: a failure loses R plus the step in flight, not half a period.
    assert goodput.ettr(90, 10, 20, 1000, lost_s=1) == pytest.approx(0.9 * (1 - 21 / 1000))
    assert goodput.ettr(1, 10, 2000, 1000) == 0.0  # never negative


def test_failures_in_process_does_not_survive_cost_a_restart_and_half_a_period():
    # A quarter of failures fall back: each of those loses 5 s of restart + (90 + 10) / 2; the
    # rest lose R = 0.3 s plus the 0.1 s step in flight.
    lost = 0.75 * (0.3 + 0.1) + 0.25 * (5 + 50)
    assert goodput.ettr(90, 10, 0.3, 1000, lost_s=0.1, fallback=(0.25, 5)) == pytest.approx(0.9 * (1 - lost / 1000))
    # So at 100,000 GPUs in-process recovery no longer looks free: its best interval is finite and
    # its ETTR below the all-survived projection.
    mttf_s = goodput.GPU_MTTF_HOURS * 3600 / 100_000
    alone = goodput.best_interval(10.0, 0.3, mttf_s, lost_s=0.1)
    mixed = goodput.best_interval(10.0, 0.3, mttf_s, lost_s=0.1, fallback=(0.5, 1.5))
    assert mixed[1] < alone[1] - 0.01 and mixed[0] < alone[0] / 2


def test_the_best_interval_is_youngs_when_recovery_is_negligible():
    checkpoint_s, mttf_s = 30.0, 3 * 3600.0
    interval, best = goodput.best_interval(checkpoint_s, 0.0, mttf_s)
    assert interval == pytest.approx(math.sqrt(2 * checkpoint_s * mttf_s), rel=0.05)
    assert best == pytest.approx(goodput.ettr(interval, checkpoint_s, 0.0, mttf_s))
    # A slower recovery never helps, and a bigger job (shorter MTTF) always loses more.
    assert goodput.best_interval(checkpoint_s, 60.0, mttf_s)[1] < best
    assert goodput.best_interval(checkpoint_s, 0.0, mttf_s / 16)[1] < best


def test_the_gpu_mttf_comes_from_the_llama3_count():
    assert goodput.GPU_MTTF_HOURS == pytest.approx(16384 * 54 * 24 / 419)
    assert goodput.GPU_MTTF_HOURS / 16384 == pytest.approx(3.09, abs=0.01)  # one interruption per ~3 h


def recovery_result(path, **styles):
    figures = {
        "styles": {name: {"median_s": seconds} for name, seconds in styles.items()},
        "checkpoint_s": 0.5,
        "step_s": 0.1,
    }
    path.write_text(
        json.dumps({"name": "recovery", "command": "lab bench recovery", "markdown": [], "figures": figures})
    )


def bench(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "lab", "bench", "goodput", "--out", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_projection_from_a_saved_recovery_result(tmp_path):
    recovery_result(tmp_path / "recovery.json", **{"bare torchrun": 7.0, "tuned": 0.7, "in-process": 0.2})
    out = bench(tmp_path)
    assert out.returncode == 0, out.stderr
    saved = json.loads((tmp_path / "goodput.json").read_text())
    rows = saved["figures"]["rows"]
    assert {(r["gpus"], r["style"]) for r in rows} == {(g, s) for g in (1024, 16384, 100000) for s in goodput.STYLES}
    for gpus in (1024, 16384, 100000):
        by_style = {r["style"]: r["ettr"] for r in rows if r["gpus"] == gpus}
        assert by_style["bare torchrun"] < by_style["tuned"] < by_style["in-process"]
    table = [line for line in out.stdout.splitlines() if line.startswith("| 16,384 |")]
    assert len(table) == 3 and "3.1 h" in table[0]
    assert (tmp_path / "goodput.png").read_bytes()[:4] == b"\x89PNG"
    assert "The Llama 3 Herd of Models" in out.stdout  # the source is on the page


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (None, [], "run `lab bench recovery` first"),
        ("garbage", [], "is not a result of `lab bench recovery`"),
        ("partial", [], "lacks the styles in-process"),
        ("full", ["--checkpoint-s", "-1"], "--checkpoint-s must be positive"),
        ("full", ["--gpu-mttf-hours", "0"], "--gpu-mttf-hours must be positive"),
    ],
)
def test_bad_input_is_one_line(tmp_path, setup, args, message):
    path = tmp_path / "recovery.json"
    if setup == "garbage":
        path.write_text("not json")
    elif setup == "partial":
        recovery_result(path, **{"bare torchrun": 7.0, "tuned": 0.7})
    elif setup == "full":
        recovery_result(path, **{"bare torchrun": 7.0, "tuned": 0.7, "in-process": 0.2})
    out = bench(tmp_path, *args)
    assert out.returncode != 0
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


def chaos_ledger(path, faults, wall_s=100.0, checkpoint_s=2.0, ettr=0.8, load=0):
    """A `lab bench chaos` result as it saves one: the ledger as its figures."""
    struck = [{"kind": k, "ranks": r, "time": 1.0, "recovered_s": back, "bound_s": 70.0} for k, r, back in faults]
    ledger = {"world_size": 4, "wall_s": wall_s, "checkpoint_s": checkpoint_s, "ettr": ettr, "faults": struck}
    ledger["load"] = load
    path.write_text(json.dumps({"name": "chaos", "command": "lab bench chaos", "markdown": [], "figures": ledger}))


def startup_result(path, start_s, agent_s=1.5, end_s=0.5):
    """A `lab bench startup` result; end_s None: from before the bench timed a job's end."""
    figures = {"lab up (netns hosts, no Prometheus)": {"median_s": start_s}}
    figures["stages"] = [{"agent": agent_s + d, "total": start_s} for d in (-0.1, 0.0, 0.4)]  # median: agent_s
    if end_s is not None:
        for stage, d in zip(figures["stages"], (0.3, 0.0, -0.2), strict=True):
            stage["end"] = end_s + d  # median: end_s
    path.write_text(json.dumps({"name": "startup", "command": "lab bench startup", "markdown": [], "figures": figures}))


def test_a_campaigns_mix_is_projected_kind_by_kind_from_single_fault_figures_beside_its_measured_ettr(tmp_path):
    """Recorded figures: in-process 0.5 s, tuned 1.0 s, a job's start 3.0 s, an agent's 1.5 s, a
    job's end once a node is preempted 0.5 s; the campaign's process-group timeout is 20 s (a
    frozen rank is ended at a third of it) and its checkpoint period 1 s."""
    recovery_result(tmp_path / "recovery.json", **{"bare torchrun": 7.0, "tuned": 1.0, "in-process": 0.5})
    startup_result(tmp_path / "startup.json", 3.0)
    faults = [
        ("kill-worker", [1], 0.4),
        ("hang-worker", [2], 7.0),
        ("kill-node", [2, 3], 6.0),  # node 1: back after 1 s, a tuned restart, half a period redone
        ("kill-node", [0, 1], 9.0),  # node 0 holds the store: the job starts again
        ("preempt-node", [3], 11.0),
        ("kill-in-regroup", [0, 2], 1.1),
    ]
    chaos_ledger(tmp_path / "chaos.json", faults, ettr=0.7)
    out = bench(tmp_path, "--chaos-json", str(tmp_path / "chaos.json"))
    assert out.returncode == 0, out.stderr
    figures = json.loads((tmp_path / "goodput.json").read_text())["figures"]
    assert figures["fallback_share"] == pytest.approx(3 / 6)  # the two node losses and the preemption
    kinds = figures["campaign_mix"]["kinds"]
    projected = {kind: row["projected_s"] for kind, row in kinds.items()}
    assert projected == pytest.approx({
        "kill-worker": 0.5, "hang-worker": 20 / 3 + 0.5, "kill-node": 1.0 + 1.5 + 1.0 + 0.5,
        "kill-node of node 0": 0.5 + 3.0 + 0.5, "preempt-node": 0.5 + 3.0, "kill-in-regroup": 1.0,
    })  # fmt: skip
    assert kinds["kill-node"]["measured_median_s"] == 6.0 and kinds["kill-node of node 0"]["struck"] == 1
    expected = (100 - sum(projected.values()) - 2) / 100  # one of each struck; 2 s of checkpoints
    assert figures["campaign_mix"]["projected_ettr"] == pytest.approx(expected)
    assert figures["campaign_mix"]["measured_ettr"] == 0.7
    assert "the model misses most on preempt-node (11.00 s measured against 3.50 s projected" in out.stdout
    goal = "Goal: measured ETTR within 2 points of the projection for the same mix (quiet figures)"
    assert f"{goal}: **missed** ({100 * (expected - 0.7):.1f} points below it)" in out.stdout
    assert "Not projected beside" not in out.stdout  # a quiet campaign is judged by quiet figures


def test_a_busy_campaign_is_judged_against_figures_measured_as_busy_and_shown_beside_the_quiet_ones(tmp_path):
    """The same faults and figures, but the campaign ran beside 2 busy processes, and the benches
    measured again beside 2 (--load 2): recovery and starts twice as slow. The goal is judged
    against those; the quiet projection stays on the page."""
    recovery_result(tmp_path / "recovery.json", **{"bare torchrun": 7.0, "tuned": 1.0, "in-process": 0.5})
    startup_result(tmp_path / "startup.json", 3.0)
    faults = [("kill-worker", [1], 1.0), ("kill-node", [0, 1], 7.0), ("preempt-node", [3], 6.0)]
    chaos_ledger(tmp_path / "chaos.json", faults, ettr=0.84, load=2)  # 7 points under the quiet projection
    quiet_only = bench(tmp_path, "--chaos-json", str(tmp_path / "chaos.json"))
    assert quiet_only.returncode == 0, quiet_only.stderr
    assert "Not projected beside 2 busy process(es): no " in quiet_only.stdout
    assert "lab bench recovery --load 2" in quiet_only.stdout and "(quiet figures): **missed**" in quiet_only.stdout

    recovery_result(tmp_path / "recovery-load2.json", **{"bare torchrun": 9.0, "tuned": 2.0, "in-process": 1.0})
    startup_result(tmp_path / "startup-load2.json", 6.0, agent_s=3.0, end_s=1.0)
    out = bench(tmp_path, "--chaos-json", str(tmp_path / "chaos.json"))
    assert out.returncode == 0, out.stderr
    mix = json.loads((tmp_path / "goodput.json").read_text())["figures"]["campaign_mix"]
    busy = {kind: row["projected_s"] for kind, row in mix["at_load"]["kinds"].items()}
    assert busy == pytest.approx({"kill-worker": 1.0, "kill-node of node 0": 1.0 + 6.0 + 0.5, "preempt-node": 7.0})
    expected = (100 - sum(busy.values()) - 2) / 100
    assert mix["at_load"]["projected_ettr"] == pytest.approx(expected)
    assert mix["projected_ettr"] == pytest.approx((100 - 0.5 - 4.0 - 3.5 - 2) / 100)  # the quiet one, kept
    assert "| kill-node of node 0 | 1 | 4.00 s | 7.50 s | 7.00 s | 7.5 s | 7.0 s |" in out.stdout
    goal = "Goal: measured ETTR within 2 points of the projection for the same mix (figures beside 2 busy)"
    assert f"{goal}: **met** ({100 * abs(expected - 0.84):.1f} points" in out.stdout
    assert "Not projected beside" not in out.stdout


def test_a_campaign_without_a_startup_result_says_what_is_not_projected_and_why(tmp_path):
    recovery_result(tmp_path / "recovery.json", **{"bare torchrun": 7.0, "tuned": 1.0, "in-process": 0.5})
    chaos_ledger(tmp_path / "chaos.json", [("kill-worker", [1], 0.4)])
    out = bench(tmp_path, "--chaos-json", str(tmp_path / "chaos.json"))
    assert out.returncode == 0, out.stderr
    assert "The campaign's mix is not projected: no " in out.stdout and "run `lab bench startup` first" in out.stdout


def test_a_startup_result_that_never_timed_a_jobs_end_is_not_projected_from(tmp_path):
    """Projected from its start alone, a restart came out 2-3 s short: such a result is refused."""
    recovery_result(tmp_path / "recovery.json", **{"bare torchrun": 7.0, "tuned": 1.0, "in-process": 0.5})
    startup_result(tmp_path / "startup.json", 3.0, end_s=None)
    chaos_ledger(tmp_path / "chaos.json", [("preempt-node", [3], 5.0)])
    out = bench(tmp_path, "--chaos-json", str(tmp_path / "chaos.json"))
    assert out.returncode == 0, out.stderr
    assert f"is not projected: {tmp_path / 'startup.json'} has no job end among its stages" in out.stdout


@pytest.mark.parametrize(
    ("ledger", "message"),
    [("not json", "is not a `lab chaos` ledger"), ("empty", "the campaign injected no fault")],
)
def test_a_chaos_json_that_is_no_campaign_is_one_line(tmp_path, ledger, message):
    recovery_result(tmp_path / "recovery.json", **{"bare torchrun": 7.0, "tuned": 1.0, "in-process": 0.5})
    path = tmp_path / "chaos.json"
    path.write_text("not json") if ledger == "not json" else chaos_ledger(path, [])
    out = bench(tmp_path, "--chaos-json", str(path))
    assert out.returncode != 0
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr
