"""Where a step's time went: this rank's own work, or waiting in the gradient all-reduce.

DDP steps in lockstep, so every rank's step takes as long as the slowest rank's; step time
cannot say who is slow. Busy time can: the slow rank arrives at the all-reduce last and
waits for nobody, the others wait for it there. A step's busy time is its wall time up to
the trainer's pacing sleep, less the span from its first bucket's all-reduce launch to its
last one's completion (lab.workloads.comm_hooks writes those two moments here; DDP has
waited for every bucket by the time backward returns). lab.health.stragglers compares it across
ranks. The pacing sleep (--step-time) is nobody's work, so it is left out, but not what it
overran by: a rank stopped or starved while it slept pays for it there, and its peers wait
for it in the next all-reduce.
"""

from __future__ import annotations

import time

from lab.health.events import EventLog
from lab.health.rank_exporter import RankMetrics


class StepClock:
    """One rank's step: when it began and when its all-reduces began and ended."""

    def __init__(self) -> None:
        self._started = 0.0
        self._first_launch: float | None = None
        self._last_done = 0.0

    def step_started(self) -> float:
        self._started = time.perf_counter()
        self._first_launch, self._last_done = None, 0.0
        return self._started

    def allreduce_launched(self, at: float) -> None:
        if self._first_launch is None:
            self._first_launch = at

    def allreduce_done(self, at: float) -> None:
        self._last_done = max(self._last_done, at)

    def pace(self, step_time: float) -> float:
        """Sleep until step_time after the step began; the seconds the sleep overran by."""
        target, now = self._started + step_time, time.perf_counter()
        if now < target:
            time.sleep(target - now)
        return max(0.0, time.perf_counter() - max(target, now))

    def busy(self) -> float:
        """Seconds of the step so far that this rank spent outside the all-reduce."""
        worked = time.perf_counter() - self._started
        waited = self._last_done - self._first_launch if self._first_launch is not None else 0.0
        return max(0.0, worked - max(0.0, waited))


def record_step(
    events: EventLog,
    metrics: RankMetrics | None,
    step: int,
    seconds: float,
    data: tuple[int, list],
    loss: float,
    busy: float,
) -> None:
    """A step's monitoring: its event line (with its epoch and sample indices) and its metrics."""
    events.step(step, loss, seconds, busy, data)
    if metrics:
        metrics.step_done(step, seconds, len(data[1]), loss, busy)
