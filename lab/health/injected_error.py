"""An ordinary Python exception in one rank, on request: the rank-exception drill's fault.

A worker that calls install() raises RuntimeError from whatever its main thread is running
when SIGUSR2 arrives (Python runs signal handlers between bytecodes, so a rank inside a
gloo collective raises as soon as the collective returns). The trainer and every script the
lab watches (lab.node.user_script) install it; the script's own code is unchanged, and one
that installs its own SIGUSR2 handler keeps it.
"""

from __future__ import annotations

import os
import signal

SIGNAL = signal.SIGUSR2
MARK = "exception injected by the lab's rank-exception drill"


def raise_injected(_signum: int, _frame: object) -> None:
    raise RuntimeError(f"rank {os.environ.get('RANK', '?')}: {MARK}")


def install() -> None:
    signal.signal(SIGNAL, raise_injected)
