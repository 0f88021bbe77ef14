"""The per-step metrics, kept as plain numbers and turned into metric families at scrape time.

A training step updates seven figures. Through prometheus_client's metric objects that
is seven method calls, each taking its value's lock: about 7 us a step, measured
inside the trainer on the lab's 2-core machines, a visible share of a 1.5 ms step.
Here a step costs a few attribute updates, and the work of building the families is
done by the scrape, once every scrape interval, on the exporter's own thread.

Each figure has one writer: the training thread for the step figures, and the thread
that completes the all-reduce for its histogram. A scrape may read a histogram between
an observation's bucket and its sum; Prometheus' `_count` comes from the same copied
bucket counts as its buckets, so they always agree.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from lab.health.stragglers import WINDOW as BUSY_WINDOW
from lab.health.stragglers import typical


class StepHistogram:
    """A histogram for one writer: `observe` is a bisect and two additions."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]):
        self.name, self.documentation = name, documentation
        self.bounds = list(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf's own
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # Bucket `le=b` counts values <= b: the first bound not below the value.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def family(self) -> HistogramMetricFamily:
        counts, total = list(self.counts), self.sum
        cumulative, running = [], 0
        for bound, count in zip([*self.bounds, math.inf], counts, strict=False):
            running += count
            cumulative.append(("+Inf" if bound == math.inf else repr(float(bound)), running))
        return HistogramMetricFamily(self.name, self.documentation, buckets=cumulative, sum_value=total)


class StepMetrics:
    """What every training step reports, read by the registry at scrape time."""

    def __init__(self, step_buckets: Sequence[float], allreduce_buckets: Sequence[float]):
        self.step = 0
        self.steps = 0
        self.samples = 0
        self.last_step_time = 0.0
        self.loss = math.nan
        self.nonfinite_losses = 0
        self.busy: deque[float] = deque(maxlen=BUSY_WINDOW)
        self.step_duration = StepHistogram("lab_step_duration_seconds", "Wall time of one training step.", step_buckets)
        self.allreduce_duration = StepHistogram(
            "lab_allreduce_duration_seconds", "Gradient all-reduce time per DDP bucket.", allreduce_buckets
        )

    def step_done(self, step: int, seconds: float, samples: int, loss: float, busy: float | None = None) -> None:
        self.step = step
        if busy is not None:
            self.busy.append(busy)
        self.steps += 1
        self.samples += samples
        self.step_duration.observe(seconds)
        self.last_step_time = time.time()
        if math.isfinite(loss):
            self.loss = loss
        else:
            self.nonfinite_losses += 1

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("lab_step", "The training step this rank completed last.", value=self.step)
        yield CounterMetricFamily("lab_steps", "Training steps completed by this process.", value=self.steps)
        yield CounterMetricFamily("lab_samples", "Samples processed by this process.", value=self.samples)
        yield GaugeMetricFamily(
            "lab_last_step_timestamp_seconds", "When the last step completed.", value=self.last_step_time
        )
        yield self.step_duration.family()
        busy = list(self.busy)
        if busy:  # a rank that does not time its all-reduce has no busy figure (lab.workloads.step_clock)
            yield GaugeMetricFamily(
                "lab_step_busy_seconds",
                f"Seconds a step outside the all-reduce, this rank's last {BUSY_WINDOW} steps (lab.health.stragglers).",
                value=typical(busy),
            )
        yield self.allreduce_duration.family()
        yield GaugeMetricFamily("lab_loss", "Loss of the last step on this rank.", value=self.loss)
        yield CounterMetricFamily(
            "lab_nonfinite_loss", "Steps whose loss was NaN or infinite.", value=self.nonfinite_losses
        )
