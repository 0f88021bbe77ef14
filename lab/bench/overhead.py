"""`lab bench overhead`: what the rank exporter (and the event log) cost the trainer's steps.

    lab bench overhead [--trials 3]

Two ranks under torchrun on this host, the trainer unpaced, for two models: the default
tiny one (about 1.5 ms a step, where any per-step cost shows) and a wide one (about
25 ms a step, closer to real training), each with the exporters alone and with the
exporters and the event log (what the lab's jobs run).

Each run is the trainer's own `--ab-monitoring`: one run switches the monitoring off
and on every few steps (lab/workloads/monitoring_ab.py). It gives two figures: the time
a step spends inside the monitoring calls, timed where they run (the cost, to a
fraction of a microsecond), and the whole step's median with monitoring on against
off, which also holds any indirect cost but resolves only tens of microseconds on a
shared 2-core machine; the A/A difference says how many. Also times a scrape of one
rank's /metrics, which Prometheus does every 2 s on the exporter's own thread.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from lab.bench import TRIALS, free_port
from lab.bench.result import BenchResult, goal_line, this_command
from lab.errors import LabError
from lab.health.rank_exporter import RankMetrics
from lab.workloads import script_path

AB_LINE = re.compile(r"monitoring A/B (\{.*\})")
SCRAPE_INTERVAL_S = 2.0

MODELS = {
    "tiny (width 64, batch 8)": ["--steps", "6000", "--ab-monitoring", "2"],
    "wide (width 16384, batch 256)": [
        "--steps",
        "400",
        "--ab-monitoring",
        "2",
        "--width",
        "16384",
        "--batch-size",
        "256",
    ],
}
MONITORING = {"exporters": False, "exporters + event log": True}


def free_port_block(size: int) -> int:
    """The first of `size` ports for the ranks' exporters (the first one free now)."""
    base = free_port()
    return base if base + size < 65535 else 20000


def trial(model_args: list[str], event_log: bool, tmp: str) -> dict:
    """One trainer run switching its monitoring off and on; its A/B summary."""
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        f"--log-dir={tmp}/torchrun",
        script_path("trainer"),
        *model_args,
        "--ckpt-every",
        "0",
        "--metrics-port-base",
        str(free_port_block(2)),
    ]
    if event_log:
        argv += ["--events-dir", f"{tmp}/ev-{time.time()}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    found = AB_LINE.search(out.stdout)
    if out.returncode != 0 or not found:
        raise LabError(
            f"the trainer's monitoring A/B run failed (exit {out.returncode}): "
            f"{(out.stderr.strip().splitlines() or ['no output'])[-1]}"
        )
    return json.loads(found[1])


def scrape_ms(samples: int = 200) -> float:
    metrics = RankMetrics(rank=0, local_rank=0, node="bench", world_size=1, restart=0)
    port = free_port()
    metrics.serve(port)
    for _ in range(50):
        metrics.step_done(1, 0.01, 8, 0.5)
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
            response.read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def whole_step_line(figures: dict) -> str:
    """Which whole-step differences stand out of their run's A/A difference (twice over)."""
    beyond = [
        f"{name} ({1000 * row['on_minus_off_ms']:+.0f} us)"
        for name, row in figures.items()
        if isinstance(row, dict) and abs(row["on_minus_off_ms"]) > 2 * abs(row["aa_ms"])
    ]
    return (
        "Whole-step differences hold indirect costs too, resolved only to about their A/A difference; "
        + ("more than twice it: " + ", ".join(beyond) if beyond else "none is more than twice it")
        + "."
    )


def add_arguments(p) -> None:
    TRIALS.add_to(p)


def run(args, out_dir: Path) -> BenchResult:
    if args.trials < 1:
        raise LabError("--trials must be at least 1")
    lines = [
        f"2 ranks under torchrun, the trainer unpaced, monitoring switched off and on every 2 steps "
        f"within each run (`--ab-monitoring 2`); medians of {args.trials} runs:",
        "",
        "| model | monitoring | step | in the monitoring calls | share of the step | whole step, on - off | A/A |",
        "|---|---|---|---|---|---|---|",
    ]
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lab-bench-") as tmp:
        for model, model_args in MODELS.items():
            for monitoring, event_log in MONITORING.items():
                runs = []
                for i in range(args.trials):
                    runs.append(trial(model_args, event_log, tmp))
                    print(
                        f"{model}, {monitoring}, run {i + 1}: {runs[-1]['monitoring_us']:.1f} us in the "
                        f"calls, step {runs[-1]['off_ms']:.3f} ms off / {runs[-1]['on_ms']:.3f} ms on",
                        flush=True,
                    )
                for r in runs:
                    r["on_minus_off_ms"] = r["on_ms"] - r["off_ms"]
                row = {
                    key: statistics.median(r[key] for r in runs)
                    for key in ("monitoring_us", "off_ms", "on_minus_off_ms", "aa_ms")
                }
                row["share_pct"] = row["monitoring_us"] / (10 * row["off_ms"])
                row["runs"] = runs
                figures[f"{model}, {monitoring}"] = row
                lines.append(
                    f"| {model} | {monitoring} | {row['off_ms']:.3f} ms | {row['monitoring_us']:.1f} us | "
                    f"{row['share_pct']:.2f}% | {1000 * row['on_minus_off_ms']:+.0f} us | "
                    f"{1000 * row['aa_ms']:+.0f} us |"
                )
    figures["scrape_ms"] = scrape_ms()
    worst = max(row["share_pct"] for key, row in figures.items() if key.endswith(", exporters"))
    lines += [
        "",
        f"One /metrics scrape of a rank exporter: {figures['scrape_ms']:.2f} ms (median of 200), "
        f"every {SCRAPE_INTERVAL_S:g} s: {figures['scrape_ms'] / (10 * SCRAPE_INTERVAL_S):.3f}% "
        "of a rank's time, at most.",
        goal_line(
            "the exporters cost under 1% of step time",
            worst < 1.0,
            f"at most {worst:.2f}% of a step, the tiny model's, timed in the monitoring calls",
        ),
        whole_step_line(figures),
        "The exercises pace the tiny model to 100 ms a step.",
    ]
    return BenchResult("overhead", this_command(), lines, figures)
