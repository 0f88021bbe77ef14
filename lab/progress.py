"""One optional line for your own training script: tell the lab's drills which step it is on.

    try:
        from lab.progress import step
    except ImportError:  # the lab is not installed where this runs
        def step(n, unit="step"): pass
    ...
    step(global_step)            # or step(epoch, unit="epoch")
    step(global_step, samples=batch_indices, epoch=epoch)  # and the drills count skipped or repeated data

Outside the lab (not a torchrun worker, or no LAB_EVENTS_DIR) it does nothing. In a drill
(`lab exercise run NAME --script ...`) the count it records is preferred over anything the
drill reads from the script's output (see lab.node.user_script).
"""

from __future__ import annotations

import os

from lab.health.events import Event, EventLog
from lab.nodeenv import NodeEnv

_log: EventLog | None = None
_opened = False
called = False  # the script reports its own steps (lab.node.user_script then stops reading its output)


def use(log: EventLog | None) -> None:
    """Where steps go (lab.node.user_script hands over the rank's event log)."""
    global _log, _opened
    _log, _opened = log, True


def step(n: int, unit: str = "step", samples=None, epoch: int | None = None) -> None:
    """Record that this rank is at step (or epoch, ...) n; with the sample indices the step
    trained on and its epoch, the drills judge exactly-once data (lab.exercises.samples)."""
    global _log, _opened, called
    called = True
    if not _opened:  # first call without the shim: a worker of `lab run` or bare torchrun
        _opened = True
        directory, rank = NodeEnv.parse().events_dir, os.environ.get("RANK")
        if directory and rank is not None:
            _log = EventLog(directory, int(rank), int(os.environ.get("LOCAL_RANK", "0")))
    if _log is None:
        return
    data = {} if samples is None or epoch is None else {"epoch": int(epoch), "samples": [int(i) for i in samples]}
    _log.write(Event.STEP, step=int(n), unit=str(unit), source="helper", **data)
