"""A straggler made on purpose: a process stopped for a fraction of every period.

    python -m lab.node.duty_cycle PID STOPPED_FRACTION PERIOD_S STOP_FILE

Local nodes run `duty_cycle` on a thread of their agent; Docker nodes exec this module
in the container (the worker's pid is the container's), stopped by a file in the node's
directory, which the host and the container both see.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable


def duty_cycle(pid: int, stopped_fraction: float, period_s: float, wait: Callable[[float], bool]) -> None:
    """SIGSTOP pid for stopped_fraction of every period, until wait(seconds), which waits
    that long, says to stop, or pid is gone. pid is left running."""
    try:
        while True:
            os.kill(pid, signal.SIGSTOP)
            wait(period_s * stopped_fraction)
            os.kill(pid, signal.SIGCONT)
            if wait(period_s * (1 - stopped_fraction)):
                return
    except ProcessLookupError:
        return


def main(argv: list[str]) -> None:
    pid, stopped_fraction, period_s, stop_file = int(argv[0]), float(argv[1]), float(argv[2]), argv[3]

    def wait(seconds: float) -> bool:
        time.sleep(seconds)
        return os.path.exists(stop_file)

    duty_cycle(pid, stopped_fraction, period_s, wait)


if __name__ == "__main__":
    main(sys.argv[1:])
