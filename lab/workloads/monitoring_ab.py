"""Monitoring's cost, measured inside one training run: the trainer's `--ab-monitoring K`.

Separate runs with monitoring on and off differ by more than monitoring costs: on the
lab's 2-core machines two runs of the same job spread by 10% (process placement,
memory layout, neighbours), which buries a cost of a fraction of a percent. So the
trainer switches its per-step monitoring (the event line, the rank's metrics, the
all-reduce observation) off and on every K steps of one run, and times whole loop
iterations. Both halves run in the same processes, with the same model and data, and
interleaved, so slow drift falls on both equally.

The first two blocks' worth of steps are warm-up and left out. The off blocks split into two
alternating sets give an A/A comparison: the difference a null change shows, the
resolution of this measurement. On the lab's machines that is tens of microseconds a
step (gloo's all-reduce on two shared cores jitters), more than monitoring costs. So
the monitoring calls are also timed where they run: the mean time a step spends in
them (`monitoring_us`), the cost itself, to a fraction of a microsecond.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable

WARMUP_BLOCKS = 2


class MonitoringAB:
    def __init__(self, block: int):
        self.block = block
        self.on = False
        self._starts: list[tuple[int, float]] = []
        self._spent = {"steps": 0.0, "allreduce": 0.0}  # seconds inside the monitoring calls

    def monitoring_on(self, step: int) -> bool:
        return (step // self.block) % 2 == 1

    def step_started(self, step: int) -> None:
        """Call at the top of every loop iteration, before the step's work."""
        self._starts.append((step, time.perf_counter()))
        self.on = self.monitoring_on(step)

    def timed(self, record: Callable[..., None], *args) -> None:
        """Run a step's monitoring, `record(*args)`, timing it."""
        started = time.perf_counter()
        record(*args)
        self._spent["steps"] += time.perf_counter() - started

    def gate(self, observe: Callable[[float], None]) -> Callable[[float], None]:
        """`observe`, called and timed only while monitoring is on (for the all-reduce hook,
        which runs on the thread completing the all-reduce: the only writer of its figure)."""

        def gated(seconds: float) -> None:
            if self.on:
                started = time.perf_counter()
                observe(seconds)
                self._spent["allreduce"] += time.perf_counter() - started

        return gated

    def summary(self) -> dict:
        """Median seconds per iteration with monitoring off and on, and the A/A difference.

        An iteration runs from the start of a step to the start of the next, so it holds
        the step's monitoring too.
        """
        on: list[float] = []
        off_even: list[float] = []
        off_odd: list[float] = []
        iterations = itertools.pairwise(self._starts)
        for (step, started), (_, next_started) in list(iterations)[WARMUP_BLOCKS * self.block :]:
            block = step // self.block
            seconds = next_started - started
            if self.monitoring_on(step):
                on.append(seconds)
            else:
                (off_even if (block // 2) % 2 == 0 else off_odd).append(seconds)
        if not (on and off_even and off_odd):
            raise ValueError(f"too few steps for monitoring A/B in blocks of {self.block}")
        steps_monitored = sum(self.monitoring_on(step) for step, _ in self._starts)
        return {
            "monitoring_us": 1e6 * sum(self._spent.values()) / steps_monitored,
            "of_which_allreduce_us": 1e6 * self._spent["allreduce"] / steps_monitored,
            "block": self.block,
            "steps_on": len(on),
            "steps_off": len(off_even) + len(off_odd),
            "on_ms": 1000 * statistics.median(on),
            "off_ms": 1000 * statistics.median(off_even + off_odd),
            "aa_ms": 1000 * (statistics.median(off_odd) - statistics.median(off_even)),
        }
