"""A restart budget that counts restarts without progress, not restarts.

torchrun's `--max-restarts K` counts every restart. That budget lies both ways: a script that
crashes as it starts burns it one slow rendezvous at a time, and a job that trains for hours
between rare faults is stopped by the K+1-th fault it would have survived. Under the lab's
agent, K counts restarts *in a row without progress*:

- progress is a new highest step in any rank's event log (lab.health.events: the trainer's
  steps, a user script's printed or reported progress), a step the job had never reached. A
  job that resumes from a checkpoint and dies again at the same step makes none;
- a failure after progress refills the budget: the job is not stopped by faults it survived;
- when the budget is spent without progress, the agent stops the workers and lab.node.launch
  exits CRASH_LOOP_EXIT saying "crash loop: no progress in K restarts", which the lab's
  reports and the Kubernetes Job's pod failure policy (k8s/base/job.yaml: FailJob, so a new
  pod cannot start the count again) both read.

Restart numbers stay what torchrun would give (TORCHELASTIC_RESTART_COUNT, the workers file):
a refill raises the spec's max_restarts by what was spent, so max_restarts - remaining still
counts every restart. A job whose ranks report no progress at all has every restart counted,
as torchrun would count it. `--torch-defaults` leaves torchrun's count alone.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lab.health.events import Event

CRASH_LOOP_EXIT = 86  # distinct from torchrun's 1 (gave up) and argparse's 2
PROGRESS_EVENTS = (Event.STEP, Event.CHECKPOINT_SAVED)


@dataclass
class Progress:
    """The highest step in a directory of event logs, read incrementally (each file from where
    the last look stopped: logs grow by appending)."""

    events_dir: Path
    highest: int | None = None
    _offsets: dict[Path, int] = field(default_factory=dict)

    def look(self) -> bool:
        """Read what was appended; True when it holds a step higher than any seen before."""
        before = self.highest
        for path in sorted(self.events_dir.glob("rank*.jsonl")):
            self._read_new(path)
        return self.highest is not None and (before is None or self.highest > before)

    def _read_new(self, path: Path) -> None:
        try:
            with open(path, "rb") as f:
                f.seek(self._offsets.get(path, 0))
                chunk = f.read()
        except OSError:
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written is read next time
        self._offsets[path] = self._offsets.get(path, 0) + len(complete)
        for line in complete.splitlines():
            try:
                record = json.loads(line)
                step = int(record["step"]) if record.get("event") in PROGRESS_EVENTS else None
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # a torn or foreign line says nothing about progress
            if step is not None and (self.highest is None or step > self.highest):
                self.highest = step


@dataclass
class Budget:
    budget: int  # K: restarts in a row without progress
    progress: Progress
    crash_loop: bool = False

    def after_failure(self, agent, spec) -> None:
        """Called with the worker group failed, before torchelastic decides whether to restart."""
        if self.budget > 0 and self.progress.look():
            # The K start again: this restart is the first that may end without progress.
            restarts_so_far = spec.max_restarts - agent._remaining_restarts
            spec.max_restarts = restarts_so_far + self.budget
            agent._remaining_restarts = self.budget
        elif agent._remaining_restarts == 0 and self.budget > 0:
            self.crash_loop = True

    def verdict(self) -> str:
        seen = "no step seen" if self.progress.highest is None else f"highest step {self.progress.highest}"
        return f"crash loop: no progress in {self.budget} restarts ({seen}); stopped with exit {CRASH_LOOP_EXIT}"


def install(events_dir: str, budget: int) -> Budget:
    """Wrap the agent's monitor: every failed look at the workers goes through Budget first."""
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    tracker = Budget(budget, Progress(Path(events_dir)))
    original = LocalElasticAgent._monitor_workers

    def monitor(agent, worker_group):
        result = original(agent, worker_group)
        if result.state in (WorkerState.FAILED, WorkerState.UNHEALTHY):
            tracker.after_failure(agent, worker_group.spec)
        return result

    setattr(LocalElasticAgent, "_monitor_workers", monitor)  # noqa: B010 -- a patch, on purpose
    return tracker


def exit_if_crash_loop(tracker: Budget | None, error: BaseException) -> None:
    """After torchrun gave up: the crash-loop line and its exit code, when that is why."""
    if tracker is not None and tracker.crash_loop:
        print(error, file=sys.stderr)
        print(f"[lab.node.launch] {tracker.verdict()}", file=sys.stderr, flush=True)
        raise SystemExit(CRASH_LOOP_EXIT) from None
