"""`lab bench`: correctness, not speed. Formulas against hand-computed values, a tiny real
sweep on the lab's hosts with its CSV and plot, and a wrong result caught as an error."""

import csv
import json
import subprocess
import sys
import time

import pytest

from lab.bench import bandwidth
from lab.bench.result import BenchResult
from lab.errors import LabError
from lab.workloads.monitoring_ab import MonitoringAB


def test_bus_bandwidth_follows_nccl_tests_definitions():
    # 64 MiB in 0.5 s among 4 ranks: algbw 134217728 B/s.
    size, seconds = 64 << 20, 0.5
    assert bandwidth.algbw(size, seconds) == 134217728.0
    assert bandwidth.busbw("all_reduce", size, seconds, 4) == 134217728.0 * 1.5  # 2(n-1)/n = 6/4
    assert bandwidth.busbw("all_gather", size, seconds, 4) == 134217728.0 * 0.75  # (n-1)/n
    assert bandwidth.busbw("reduce_scatter", size, seconds, 8) == 134217728.0 * 7 / 8
    assert bandwidth.busbw("broadcast", size, seconds, 4) == 134217728.0
    assert bandwidth.busbw("all_reduce", size, seconds, 2) == 134217728.0  # 2 ranks: factor 1


def test_sizes_parse_and_sweep_in_even_float32_chunks():
    assert [bandwidth.parse_size(s) for s in ("4096", "1K", "256M", "1g")] == [4096, 1024, 268435456, 1 << 30]
    with pytest.raises(ValueError, match="not a size"):
        bandwidth.parse_size("12X")
    sizes = bandwidth.sweep(1024, 256 << 20, 4, ranks=4)
    assert sizes[0] == 1024 and sizes[-1] == 256 << 20 and len(sizes) == 10
    assert all(s % 16 == 0 for s in bandwidth.sweep(100, 10000, 3, ranks=4))


def run_bench(tmp_path, *args, timeout=300):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "lab",
            "bench",
            "collectives",
            "--out",
            str(tmp_path / "out"),
            "--min-bytes",
            "1K",
            "--max-bytes",
            "64K",
            "--ceiling-bytes",
            "4M",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_a_tiny_sweep_on_the_lab_hosts_writes_table_csv_and_plot(tmp_path):
    out = run_bench(tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    result = BenchResult.load(tmp_path / "out" / "collectives.json")
    with open(tmp_path / "out" / "collectives.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["op"] for r in rows} == set(bandwidth.OPS)
    assert {int(r["bytes"]) for r in rows} == {1024, 4096, 16384, 65536}
    for r in rows:
        assert r["error"] == ""
        seconds, algbw, busbw = float(r["seconds"]), float(r["algbw_GBps"]), float(r["busbw_GBps"])
        assert algbw == pytest.approx(int(r["bytes"]) / seconds / 1e9, rel=1e-4)
        assert busbw == pytest.approx(algbw * bandwidth.bus_factor(r["op"], 4), rel=1e-4)
    assert (tmp_path / "out" / "collectives.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.figures["tcp_GBps"] > 0 and result.figures["memcpy_GBps"] > 0
    assert "| all_reduce | 64K |" in out.stdout


@pytest.mark.slow
def test_a_wrong_collective_result_is_reported_as_an_error_not_a_bandwidth(tmp_path):
    out = run_bench(tmp_path, "--ops", "all_reduce,reduce_scatter", "--inject-error", "reduce_scatter")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "out" / "collectives-rows.jsonl").read_text().splitlines()]
    bad = [r for r in rows if r["op"] == "reduce_scatter"]
    assert bad and all(r["error"] and r["busbw"] is None for r in bad)
    assert all(r["error"] is None and r["busbw"] > 0 for r in rows if r["op"] == "all_reduce")
    assert "**error**" in out.stdout and "rows had wrong results" in out.stdout


def test_docs_page_is_written_from_saved_results(tmp_path):
    out_dir = tmp_path / "results"
    BenchResult("recovery", "lab bench recovery --trials 5", ["| lab | 2.89 s |"], {"lab_s": 2.89}).save(out_dir)
    BenchResult("collectives", "lab bench collectives", ["![plot](collectives.png)"], {}, ["collectives.png"]).save(
        out_dir
    )
    for name in ("chaos-docker-plain-train", "chaos-docker", "chaos"):  # one bench, a section per runtime and target
        BenchResult(name, f"lab bench chaos ({name})", [f"{name}'s ledger"], {}).save(out_dir)
    (out_dir / "soak.json").write_text('{"plan": "not a benchmark"}')  # make soak's output, same folder
    page = tmp_path / "docs" / "benchmarks.md"
    done = subprocess.run(
        [sys.executable, "-m", "lab", "bench", "docs", "--out", str(out_dir), "--output", str(page)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert text.index("## collectives") < text.index("## recovery")  # the page's fixed order
    assert text.index("## chaos\n") < text.index("## chaos-docker\n") < text.index("## chaos-docker-plain-train")
    assert "    lab bench recovery --trials 5" in text and "| lab | 2.89 s |" in text
    assert "](../results/collectives.png)" in text
    assert "cores" in text and "torch" in text


def test_docs_without_results_is_a_one_line_error(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "lab", "bench", "docs", "--out", str(tmp_path / "none")], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and "no benchmark results" in done.stderr


def test_monitoring_ab_recovers_a_known_cost_of_monitoring():
    """A 2 ms sleep as the 'monitoring' of every on-step must show up in both figures."""
    ab = MonitoringAB(block=2)
    for step in range(40):
        ab.step_started(step)
        time.sleep(0.001)  # the step's own work
        if ab.on:
            ab.timed(time.sleep, 0.002)
    ab.step_started(40)
    summary = ab.summary()
    assert (summary["steps_on"], summary["steps_off"]) == (18, 18)  # two warm-up blocks left out
    assert 2000 <= summary["monitoring_us"] < 20000  # a sleep never ends early
    assert summary["on_ms"] - summary["off_ms"] > 1.0
    assert abs(summary["aa_ms"]) < summary["on_ms"] - summary["off_ms"]


def test_monitoring_ab_needs_both_halves():
    ab = MonitoringAB(block=5)
    for step in range(12):
        ab.step_started(step)
    with pytest.raises(ValueError, match="too few steps"):
        ab.summary()


def test_on_a_gpu_the_bench_synchronises_then_times_with_cuda_events(monkeypatch):
    """No GPU here: torch.cuda.synchronize and torch.cuda.Event are test doubles that record what
    the bench asks of them. A GPU collective returns when queued, not when done, so the bench
    must synchronise before it starts the clock and read the time from events on the stream."""
    import torch

    from lab.bench.collectives_worker import Stopwatch

    calls = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.name = f"event{len([c for c in calls if c.startswith('new')])}"
            calls.append(f"new {self.name}")

        def record(self):
            calls.append(f"record {self.name}")

        def synchronize(self):
            calls.append(f"synchronize {self.name}")

        def elapsed_time(self, end):
            return 12.0  # milliseconds, as CUDA reports them

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("synchronize device"))
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    seconds = Stopwatch(torch.device("cuda", 0)).time(lambda: calls.append("collective"), reps=4)
    assert seconds == 12.0 / 1000 / 4
    assert calls == [
        "synchronize device",
        "new event0",
        "new event1",
        "record event0",
        *["collective"] * 4,
        "record event1",
        "synchronize event1",
    ]


def test_the_bench_buffers_live_on_the_ranks_device():
    """The meta device stands in for a GPU: every buffer is made where the collective runs."""
    import torch

    from lab.bench.collectives_worker import buffers

    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        made = [t for t in buffers(op, 1024, rank=1, ranks=4, device="meta") if t is not None]
        assert made and all(t.device == torch.device("meta") for t in made), op


def test_the_recovery_table_runs_the_labs_styles_on_every_runtime_and_the_others_once():
    """In-process is the lab's: its keepers run on each runtime's hosts, as the default drill runs them."""
    from lab.bench import recovery

    table = recovery.cells(["bare torchrun", "tuned", "in-process"], ["local", "docker"])
    assert table == [
        ("bare torchrun", "bare torchrun", "local", 4),
        ("tuned", "tuned", "local", 4),
        ("in-process", "in-process", "local", 4),
        ("tuned on docker", "tuned", "docker", 4),
        ("in-process on docker", "in-process", "docker", 4),
    ]
    assert recovery.cells(["bare torchrun", "in-process"], ["local"], (4, 16)) == [
        ("bare torchrun", "bare torchrun", "local", 4),
        ("in-process", "in-process", "local", 4),  # the name lab bench goodput reads
        ("in-process at 16 ranks", "in-process", "local", 16),
    ]
    with pytest.raises(LabError, match="--runtimes: unknown auto, nosuch; choose from .*docker"):
        recovery.chosen_runtimes("auto,nosuch")


@pytest.mark.parametrize(
    ("worlds", "styles", "said"),
    [
        ("4,x", ["in-process"], "whole numbers"),
        ("4,6,7", ["in-process"], "even and 4 or more.*not \\[7\\]"),
        ("2", ["tuned"], "not \\[2\\]"),
        ("8,16", ["bare torchrun", "in-process"], "bare torchrun is timed at 4 ranks only"),
    ],
)
def test_world_sizes_the_recovery_bench_cannot_run_are_refused_in_one_line(worlds, styles, said):
    from lab.bench import recovery

    with pytest.raises(LabError, match=said):
        recovery.chosen_worlds(worlds, styles)
    assert recovery.chosen_worlds("16,8,8", ["in-process"]) == [8, 16]


@pytest.mark.parametrize("bench", ["recovery", "startup"])
def test_a_negative_load_is_refused_in_one_line_before_any_trial(bench, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "lab", "bench", bench, "--load", "-1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and done.stderr.strip().endswith(": --load must be 0 or more, got -1"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing ran, nothing saved


@pytest.mark.parametrize("load", [0, 2])
def test_the_recovery_table_judges_its_goals_on_a_quiet_machine_only(load):
    """Beside busy processes (--load) a tuned restart of 1.4 s is what a busy campaign is projected
    from, not a goal missed; quiet, the same figure misses the 1 s goal."""
    import argparse

    from lab.bench import QUIET_GOALS, recovery

    rows = {
        style: {"runtime": "local", "world": 4, "median_s": s, "trials_s": [s], "work_lost_steps": 5, "stages": {}}
        for style, s in (("tuned", 1.4), ("in-process", 0.3))
    }
    abort = {"abort_s": 0.0001, "collective_s": 5.0}
    lines = recovery.report(argparse.Namespace(trials=1, hosts="netns", load=load), rows, abort)
    goals = [line for line in lines if line.startswith("- Goal:")]
    if load:
        assert goals == [] and QUIET_GOALS in lines and lines[0].startswith("Beside 2 busy process(es)")
    else:
        assert "- Goal: a tuned torchrun restart under 1 s: **missed** (1.40 s)" in goals and QUIET_GOALS not in lines
