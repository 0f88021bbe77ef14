"""The per-step figures, kept as plain numbers, expose what prometheus_client's own metrics would.

The reference is prometheus_client's Gauge, Counter and Histogram fed the same steps:
the exposition text must match line for line (bucket boundaries included), so the
faster path changes nothing a Prometheus server or the dashboard sees.
"""

import json
import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from lab.health.events import EventLog, read_events
from lab.health.rank_exporter import COMM_BUCKETS, STEP_BUCKETS, RankMetrics

# (step seconds, loss): values on bucket bounds, between them, above the last, and bad losses.
STEPS = [(0.003, 0.5), (0.01, math.nan), (0.7, 0.25), (20.0, math.inf), (0.025, 0.125), (10, -math.inf)]
ALLREDUCES = [0.0001, 0.0003, 0.005, 2.0, 9.0]


def reference_exposition(steps, allreduces) -> list[str]:
    r = CollectorRegistry()
    step = Gauge("lab_step", "The training step this rank completed last.", registry=r)
    steps_total = Counter("lab_steps", "Training steps completed by this process.", registry=r)
    samples = Counter("lab_samples", "Samples processed by this process.", registry=r)
    Gauge("lab_last_step_timestamp_seconds", "When the last step completed.", registry=r)
    duration = Histogram(
        "lab_step_duration_seconds", "Wall time of one training step.", buckets=STEP_BUCKETS, registry=r
    )
    allreduce = Histogram(
        "lab_allreduce_duration_seconds", "Gradient all-reduce time per DDP bucket.", buckets=COMM_BUCKETS, registry=r
    )
    loss = Gauge("lab_loss", "Loss of the last step on this rank.", registry=r)
    nonfinite = Counter("lab_nonfinite_loss", "Steps whose loss was NaN or infinite.", registry=r)
    for i, (seconds, value) in enumerate(steps, start=1):
        step.set(i)
        steps_total.inc()
        samples.inc(8)
        duration.observe(seconds)
        if math.isfinite(value):
            loss.set(value)
        else:
            nonfinite.inc()
    for seconds in allreduces:
        allreduce.observe(seconds)
    return exposition(r)


def exposition(registry) -> list[str]:
    text = generate_latest(registry).decode()
    # Timestamps differ by construction; everything else must not.
    return sorted(
        line
        for line in text.splitlines()
        if not line.startswith("lab_last_step_timestamp_seconds ") and "lab_created" not in line
    )


def lab_step_families(metrics: RankMetrics) -> CollectorRegistry:
    only = CollectorRegistry()
    only.register(metrics.per_step)
    return only


def test_per_step_figures_expose_exactly_what_prometheus_client_metrics_would():
    metrics = RankMetrics(rank=0, local_rank=0, node="n", world_size=2, restart=0)
    for i, (seconds, value) in enumerate(STEPS, start=1):
        metrics.step_done(i, seconds, 8, value)
    for seconds in ALLREDUCES:
        metrics.allreduce_duration.observe(seconds)
    assert exposition(lab_step_families(metrics)) == reference_exposition(STEPS, ALLREDUCES)


def test_before_any_step_counters_are_zero_and_there_is_no_loss_yet():
    metrics = RankMetrics(rank=0, local_rank=0, node="n", world_size=2, restart=0)
    samples = {s.name: s.value for family in metrics.registry.collect() for s in family.samples}
    for counter in (
        "lab_steps_total",
        "lab_samples_total",
        "lab_nonfinite_loss_total",
        "lab_step_duration_seconds_count",
        "lab_allreduce_duration_seconds_count",
    ):
        assert samples[counter] == 0, counter
    assert math.isnan(samples["lab_loss"])  # a gap on the dashboard, not a loss of 0


def test_the_step_line_is_the_record_write_would_make(tmp_path):
    log = EventLog(tmp_path, rank=3, local_rank=1)
    for step, (seconds, value) in enumerate(STEPS, start=1):
        log.step(step, value, seconds)
        log.write("step", step=step, loss=value, seconds=seconds)
    records = list(read_events(tmp_path))
    fast, generic = records[0::2], records[1::2]
    assert len(fast) == len(STEPS)
    for a, b in zip(fast, generic, strict=False):
        assert a.pop("time") <= b.pop("time")
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
